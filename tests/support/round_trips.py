"""A TCP proxy in front of a PostgreSQL server that counts round trips: each time a client
connection sends after the server last spoke (or first) is one. Whatever a query costs a host
across a network, it costs in these."""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from urllib.parse import urlsplit, urlunsplit


class RoundTripProxy:
    """Listens on a spare port of 127.0.0.1 and forwards every connection to ``target``."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.target = target
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._listener.getsockname()[1]
        self._lock = threading.Lock()
        self._trips = 0
        self._closing = False
        self._sockets: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def trips(self) -> int:
        with self._lock:
            return self._trips

    def url(self, url: str) -> str:
        """``url`` with its host and port replaced by this proxy's."""
        parts = urlsplit(url)
        user = parts.netloc.rpartition("@")[0]
        netloc = f"{user}@127.0.0.1:{self.port}" if user else f"127.0.0.1:{self.port}"
        return urlunsplit(parts._replace(netloc=netloc))

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            server = socket.create_connection(self.target)
            for end in (client, server):
                end.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, server]
            threading.Thread(target=self._pump, args=(client, server), daemon=True).start()

    def _pump(self, client: socket.socket, server: socket.socket) -> None:
        selector = selectors.DefaultSelector()
        selector.register(client, selectors.EVENT_READ, server)
        selector.register(server, selectors.EVENT_READ, client)
        client_spoke_last = False
        try:
            while True:
                for key, _ in selector.select():
                    source: socket.socket = key.fileobj  # type: ignore[assignment]
                    data = source.recv(1 << 16)
                    if not data:
                        return
                    if source is client:
                        if not client_spoke_last:
                            with self._lock:
                                self._trips += 1
                        client_spoke_last = True
                    else:
                        client_spoke_last = False
                    key.data.sendall(data)
        except OSError:
            return
        finally:
            selector.close()
            client.close()
            server.close()

    def close(self) -> None:
        self._listener.close()
        with self._lock:
            for end in self._sockets:
                end.close()


@contextmanager
def round_trip_proxy(url: str) -> Iterator[RoundTripProxy]:
    """A proxy in front of the server of PostgreSQL ``url``."""
    parts = urlsplit(url)
    proxy = RoundTripProxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    try:
        yield proxy
    finally:
        proxy.close()
