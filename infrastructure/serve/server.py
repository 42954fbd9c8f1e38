"""``runledger serve``: open the store once, serve it with uvicorn, close it on SIGINT/SIGTERM."""

from __future__ import annotations

import contextlib
import signal
import socket
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import FrameType
from typing import Final

import uvicorn

from runledger.infrastructure.collector import freeze_heap
from runledger.infrastructure.runtime import open_runtime, resolve_url
from runledger.infrastructure.serve.app import Server, create_app
from runledger.infrastructure.serve.auth import (
    TOKEN_VARIABLE,
    Access,
    InvalidTokenError,
    server_token,
)
from runledger.infrastructure.serve.hosts import (
    ALLOWED_HOSTS_VARIABLE,
    InvalidAllowedHostError,
    allowed_hosts,
)
from runledger.infrastructure.serve.probes import MetricsEndpoint
from runledger.infrastructure.storage.urls import redact_url

DEFAULT_HOST: Final = "127.0.0.1"
DEFAULT_PORT: Final = 8765
GRACE_SECONDS: Final = 5
STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)


@dataclass(frozen=True)
class ServeOptions:
    """Where to listen and who may read."""

    url: str | None = None
    host: str = DEFAULT_HOST
    port: int = DEFAULT_PORT
    public_reads: bool = False
    allowed_hosts: tuple[str, ...] = ()
    """Host names (``name`` or ``name:port``) a request may name besides the bound address."""
    metrics: MetricsEndpoint | None = None
    """``/metrics`` (``--metrics``), else no such route."""


class _StoppingServer(uvicorn.Server):
    """uvicorn's server, ending the live streams when a stop signal comes.

    uvicorn re-raises a caught signal after its graceful shutdown (so SIGTERM would kill the
    process before the store is closed); this one only stops, and the caller closes the store.
    """

    def __init__(self, config: uvicorn.Config, on_stop: Callable[[], None]) -> None:
        super().__init__(config)
        self._on_stop = on_stop

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        previous = {sig: signal.signal(sig, self.handle_exit) for sig in STOP_SIGNALS}
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        # Open event streams never end by themselves: uvicorn would wait for them.
        self._on_stop()
        super().handle_exit(sig, frame)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (port 0: any free one) for uvicorn to serve."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    # Accepted connections inherit it: without it, each answer on a kept-alive connection
    # waits for the client's delayed ACK (headers and body are two writes).
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


class CannotServeError(Exception):
    """The server cannot start as asked: one line for the operator, exit code 2."""


class CannotListenError(CannotServeError):
    """The address to listen on is taken or not this machine's."""


def serve(options: ServeOptions, say: Callable[[str], None], env: Mapping[str, str]) -> None:
    """Serve the store until SIGINT or SIGTERM, then close it."""
    url = resolve_url(options.url, env)
    try:
        token, generated = server_token(env)
        hosts = allowed_hosts(options.allowed_hosts, env)
    except (InvalidTokenError, InvalidAllowedHostError) as error:
        raise CannotServeError(str(error)) from None
    try:
        # Before the store opens: a taken port fails at once, with nothing to close.
        sock = listening_socket(options.host, options.port)
    except OSError as error:
        where = f"{options.host}:{options.port}"
        raise CannotListenError(f"cannot listen on {where}: {error.strerror}") from None
    with sock, open_runtime(url, env=env) as runtime:
        access = Access(token, public_reads=options.public_reads)
        app = create_app(runtime, access, allowed_hosts=hosts, metrics=options.metrics)
        server_state: Server = app.state.server
        host, port = sock.getsockname()[:2]
        config = uvicorn.Config(
            app,
            log_level="warning",
            timeout_graceful_shutdown=GRACE_SECONDS,
            lifespan="on",
        )
        server = _StoppingServer(config, server_state.broadcaster.close)
        shown_host = f"[{host}]" if ":" in host else host
        say(f"runledger serve: http://{shown_host}:{port}/ on {redact_url(url)}")
        if generated:
            say(f"token: {token}")
        else:
            say(f"token: from {TOKEN_VARIABLE}")
        reads = "public" if options.public_reads else "need the token"
        also = f"; hosts allowed besides {shown_host}: {', '.join(hosts)}" if hosts else ""
        say(f"reads {reads}; writes need the token{also}; SIGINT or SIGTERM stops")
        # Startup's imports and the open store live as long as the server: full collections
        # walking them paused requests for tens of milliseconds (see ``collector``).
        freeze_heap()
        server.run(sockets=[sock])
    say("runledger serve: stopped, store closed")


__all__: Sequence[str] = [
    "ALLOWED_HOSTS_VARIABLE",
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "CannotListenError",
    "CannotServeError",
    "ServeOptions",
    "listening_socket",
    "serve",
]
