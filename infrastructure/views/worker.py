"""A projection worker: follows the log in its own process until told to stop.

On PostgreSQL it sleeps on LISTEN and wakes on the NOTIFY each insert sends (through a
transaction pooler only with a ``listen_url``: a pooled session is not the listener's for long);
because a notification can be lost (or the listening connection dropped), it also polls, so a missed
wake-up delays a page by at most one poll interval and never stalls the worker. On SQLite
and memory it polls. Two workers (or a worker and embedded hosts) never double-apply a page:
each commit checks the positions it moves.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Final

import psycopg
from psycopg.sql import SQL, Identifier

from runledger.infrastructure.runtime import StoreRuntime

DEFAULT_POLL_SECONDS: Final = 0.5
SLICE_SECONDS: Final = 0.1
logger = logging.getLogger(__name__)


class _Listener:
    """A LISTEN connection that reconnects after failures (the worker keeps polling)."""

    def __init__(self, conninfo: str, channel: str) -> None:
        self.conninfo = conninfo
        self.channel = channel
        self._connection: psycopg.Connection[Any] | None = None
        self._retry_at = 0.0

    def _connect(self) -> psycopg.Connection[Any] | None:
        if self._connection is not None and not self._connection.closed:
            return self._connection
        if time.monotonic() < self._retry_at:
            return None
        try:
            connection = psycopg.connect(self.conninfo, autocommit=True)
            connection.execute(SQL("LISTEN {}").format(Identifier(self.channel)))
        except psycopg.Error:
            logger.warning("cannot LISTEN on %s; polling until it can", self.channel)
            self._retry_at = time.monotonic() + 5.0
            return None
        self._connection = connection
        return connection

    def wait(self, timeout: float, stopping: threading.Event) -> bool:
        """Block until a notification, ``timeout`` or ``stopping``; True if notified.

        Waits in short slices: a signal sets ``stopping`` but cannot interrupt libpq's wait.
        """
        deadline = time.monotonic() + timeout
        while not stopping.is_set():
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            connection = self._connect()
            if connection is None:
                stopping.wait(min(remaining, SLICE_SECONDS))
                continue
            try:
                for _ in connection.notifies(timeout=min(remaining, SLICE_SECONDS), stop_after=1):
                    return True
            except psycopg.Error:
                logger.warning("LISTEN connection lost; reconnecting, polling meanwhile")
                self.close()
        return False

    def close(self) -> None:
        if self._connection is not None:
            self._connection.close()
            self._connection = None


class ProjectionWorker:
    """Runs catch-up passes for a store whose hosts do not project in-process."""

    def __init__(
        self,
        runtime: StoreRuntime,
        *,
        poll_seconds: float = DEFAULT_POLL_SECONDS,
        on_pass: Callable[[int], None] | None = None,
    ) -> None:
        self.runtime = runtime
        self.poll_seconds = poll_seconds
        self.on_pass = on_pass
        self.stopping = threading.Event()
        self._listener = self._make_listener()

    def _make_listener(self) -> _Listener | None:
        conninfo = self.runtime.listen_conninfo
        channel = getattr(self.runtime.storage.events, "channel_name", None)
        if conninfo is None or channel is None:
            return None
        return _Listener(conninfo, channel)

    def stop(self, *_: object) -> None:
        """Ask the loop to stop after the page it is committing (safe from signal handlers)."""
        self.stopping.set()

    def run(self) -> None:
        try:
            # Code newer than a projection's active slot builds it first (blue/green): the
            # worker cannot project pages of its version into another version's tables.
            self.runtime.builds.upgrade()
            while not self.stopping.is_set():
                read = self.runtime.projector.catch_up(should_stop=self.stopping.is_set)
                if self.on_pass is not None:
                    self.on_pass(read)
                if read:
                    logger.info("projected %d events", read)
                if read:
                    continue
                if self._listener is not None:
                    self._listener.wait(self.poll_seconds, self.stopping)
                else:
                    self.stopping.wait(self.poll_seconds)
        finally:
            if self._listener is not None:
                self._listener.close()
