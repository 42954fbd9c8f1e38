"""A LISTEN connection for the NOTIFY each commit sends on PostgreSQL, kept up by whoever
waits on it: a projection worker, and the process elected to project (``leadership``)."""

from __future__ import annotations

import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any, Final

import psycopg
from psycopg.sql import SQL, Identifier

SLICE_SECONDS: Final = 0.1
"""How long one wait lasts at most before ``stopping`` is looked at again: a stop that does
not ``interrupt`` is seen within this."""
RETRY_SECONDS: Final = 5.0
logger = logging.getLogger(__name__)


class Listener:
    """A LISTEN connection that reconnects after failures (whoever waits keeps polling)."""

    def __init__(self, conninfo: str, channel: str, *, listening: bool = True) -> None:
        """``listening`` False: its connections do not LISTEN until ``listen`` is called (a
        session that listens must read what arrives, or the server's queue grows)."""
        self.conninfo = conninfo
        self.channel = channel
        self.listening = listening
        self._connection: psycopg.Connection[Any] | None = None
        self._retry_at = 0.0
        self.connections = 0
        """How many connections it has made: a new one is a new session, which holds
        nothing the last one held (its locks)."""
        # ``interrupt`` writes a byte here; a wait sleeps on it beside the connection, so a
        # closing store stops its follower at once, not at the end of a slice (100 ms on
        # every close of a PostgreSQL store that led its projections).
        self._woken, self._waker = socket.socketpair()
        self._woken.setblocking(False)
        self._waker.setblocking(False)

    def connection(self) -> psycopg.Connection[Any] | None:
        """The connection, connected now if it was not (and listening, if ``listening``);
        None while it cannot connect (tried again after ``RETRY_SECONDS``)."""
        if self._connection is not None and not self._connection.closed:
            return self._connection
        if time.monotonic() < self._retry_at:
            return None
        try:
            connection = psycopg.connect(self.conninfo, autocommit=True)
            if self.listening:
                connection.execute(SQL("LISTEN {}").format(Identifier(self.channel)))
        except psycopg.Error:
            logger.warning("cannot LISTEN on %s; polling until it can", self.channel)
            self._retry_at = time.monotonic() + RETRY_SECONDS
            return None
        self._connection = connection
        self.connections += 1
        return connection

    @property
    def connected(self) -> bool:
        """Whether a connection is open now (it is not made here)."""
        return self._connection is not None and not self._connection.closed

    def listen(self) -> bool:
        """LISTEN on the connection open now, and on every later one; whether it listens."""
        self.listening = True
        connection = self._connection
        if connection is None or connection.closed:
            return False
        try:
            connection.execute(SQL("LISTEN {}").format(Identifier(self.channel)))
        except psycopg.Error:
            logger.warning("cannot LISTEN on %s; polling until it can", self.channel)
            self.close()
            return False
        return True

    def wait(
        self,
        timeout: float,
        stopping: threading.Event,
        *,
        ignored: Callable[[int], bool] = lambda _: False,
    ) -> bool:
        """Block until a notification, ``timeout`` or ``stopping``; True if notified, or if
        the wait had to open a listening session: that session heard nothing of the commits
        made before it, so the caller must look at the log (a worker whose commit landed
        before its LISTEN otherwise slept a whole poll on it). Notifications from a server
        process ``ignored`` says so of are passed over.

        Waits in short slices, so a ``stopping`` set without ``interrupt`` is seen too.
        """
        deadline = time.monotonic() + timeout
        sessions = self.connections
        while not stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            connection = self.connection()
            if connection is None:
                stopping.wait(min(remaining, SLICE_SECONDS))
                continue
            if self.connections != sessions and self.listening:
                return True
            try:
                # What already arrived first (a query on this connection may have read it),
                # then a sleep on the socket and the waker: nothing is left unread in libpq.
                for notify in connection.notifies(timeout=0, stop_after=1):
                    if not ignored(notify.pid):
                        return True
                self._sleep(connection.fileno(), min(remaining, SLICE_SECONDS))
            except psycopg.Error:
                logger.warning("LISTEN connection lost; reconnecting, polling meanwhile")
                self.close()
                # Back to the caller at once: what it held on the session (a lock) is gone.
                return False
        return False

    def _sleep(self, fileno: int, seconds: float) -> None:
        """Until the connection's socket has something to read, ``interrupt`` or ``seconds``."""
        poller = select.poll()
        poller.register(fileno, select.POLLIN)
        poller.register(self._woken, select.POLLIN)
        if any(fd == self._woken.fileno() for fd, _ in poller.poll(seconds * 1000)):
            with suppress(BlockingIOError):
                while self._woken.recv(4096):
                    pass

    def interrupt(self) -> None:
        """End a wait now (from any thread or a signal handler); it returns unless waiting
        should go on (its ``stopping`` is not set)."""
        with suppress(OSError):
            self._waker.send(b"\0")

    def close(self) -> None:
        """Close the connection (the next ``connection`` makes a new one)."""
        if self._connection is not None:
            self._connection.close()
            self._connection = None

    def release(self) -> None:
        """Close the connection and the waker: the listener is not used again."""
        self.close()
        self._woken.close()
        self._waker.close()


__all__ = ["Listener"]
