"""Which one of the processes sharing a PostgreSQL store projects the commits that did not
take their read models with them.

A command commits its read models with its events only when its process's projections stand
exactly before the events' positions; with several writer processes another one's commit is
usually in between, and the events commit alone. Every process then projected them, each
racing the others for the same pages (four writer processes on two cores spent ~40 % of
their CPU so, in their followers). Now the processes that keep the same projections elect
one: it holds a session advisory lock on its LISTEN connection, sleeps on the commits'
NOTIFY and projects; the others commit their events alone and, before a query, wait for the
views to reach what they must show (``StoreRuntime``). Nothing depends on the election for
being right: a page still commits only where the tracking row is where it started, two
leaders for a moment only race as before, and a process whose wait runs out projects itself.
The lock goes with the connection, so a leader that dies or loses the server frees it, and
the others try to take it at each idle look (once a second).
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any, Final

import psycopg

from runledger.infrastructure.views.listener import Listener

logger = logging.getLogger(__name__)

KEY_PREFIX: Final = "runledger:projector:"


def leadership_key(channel: str, projections: Iterable[tuple[str, int]]) -> int:
    """The advisory lock key of the processes keeping these projections (name, version) of
    the store whose commits NOTIFY ``channel``: processes keeping other ones elect apart."""
    names = ",".join(f"{name}@{version}" for name, version in sorted(projections))
    digest = hashlib.blake2b(f"{KEY_PREFIX}{channel}:{names}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


class ProjectorLeadership:
    """This process's part in the election: whether it leads now, and the wait of a leader
    for the next commit."""

    def __init__(self, conninfo: str, channel: str, key: int) -> None:
        # It listens only while it leads: the others would have to read every commit's
        # NOTIFY for nothing (an unread listener holds the server's queue back).
        self._listener = Listener(conninfo, channel, listening=False)
        self._key = key
        self._lock = threading.Lock()
        self._session = 0
        """The listener's connection that holds the lock (its count)."""
        self.leading = False
        """Whether this process holds the lock (as of its last look: ``lead``)."""

    def lead(self) -> bool:
        """Take the lock if nobody holds it; whether this process leads now."""
        with self._lock:
            connection = self._connection()
            if connection is None:
                # No session to hold the lock on (the listener is refused, or the server is
                # away): this process projects itself, as every one did before elections.
                self._session = -1
                self.leading = True
                return True
            if not self.leading:
                try:
                    row = connection.execute(
                        "SELECT pg_try_advisory_lock(%s)", (self._key,)
                    ).fetchone()
                except psycopg.Error as error:
                    logger.warning("projector election failed: %s", type(error).__name__)
                    self._listener.close()
                    self.leading = False
                else:
                    self._session = self._listener.connections
                    self.leading = bool(row and row[0]) and self._listener.listen()
                    if self.leading:
                        logger.info("this process projects the store's commits")
            return self.leading

    def wait(
        self,
        timeout: float,
        stopping: threading.Event,
        *,
        ignored: Callable[[int], bool] = lambda _: False,
    ) -> bool:
        """Sleep until the NOTIFY of a commit by a server process not ``ignored`` (True),
        ``timeout`` or ``stopping``; a lost connection takes the lead with it (the server
        released the lock)."""
        notified = self._listener.wait(timeout, stopping, ignored=ignored)
        with self._lock:
            self._connection()
        return notified

    def _connection(self) -> psycopg.Connection[Any] | None:
        """The connection to try for the lock on; a connection other than the lock's (the
        last one broke, and the server let the lock go with it) ends the lead, and while
        not leading it does not listen."""
        connection = self._listener.connection()
        moved = connection is not None and self._listener.connections != self._session
        if moved and (self.leading or self._listener.listening):
            self.leading = False
            self._listener.close()
            self._listener.listening = False
            connection = self._listener.connection()
        return connection

    def nudge(self) -> None:
        """Ask the leader to look at the log now: a NOTIFY from this process's session.

        The leader's own commits that went without their read models (its projector was
        busy, or another process had moved the views) wait for its next notification or
        idle look, up to a second; a query of another process waits with them. While a
        writer queued on one run, a prune's reads of the views so waited 67 of its 85 s."""
        with self._lock:
            connection = self._listener.connection()
            if connection is None:
                return
            try:
                connection.execute("SELECT pg_notify(%s, '')", (self._listener.channel,))
            except psycopg.Error as error:
                # The wait goes on as it would have; its deadline still bounds it.
                logger.warning("projector not nudged: %s", type(error).__name__)

    def interrupt(self) -> None:
        """End a ``wait`` now (from any thread)."""
        self._listener.interrupt()

    def close(self) -> None:
        """Give the lead up: the lock ends with the connection."""
        with self._lock:
            self._listener.release()
            self.leading = False


__all__: Sequence[str] = ["ProjectorLeadership", "leadership_key"]
