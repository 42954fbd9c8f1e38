"""On PostgreSQL, other processes' commits wake the broadcaster through LISTEN/NOTIFY.

Every insert into the event log sends a NOTIFY on the log's channel. This thread LISTENs on
it with a connection of its own and calls ``wake`` for each notification, so another
process's command reaches the live streams at once rather than at the store follower's next
look (about once a second, which stays as the safety net for a lost notification or a
dropped connection). The broadcaster reads through the store, which projects anything not
yet projected first, so being woken before the other process projected is harmless.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

import psycopg
from psycopg.sql import SQL, Identifier

from runledger.infrastructure.runtime import StoreRuntime

SLICE_SECONDS: Final = 0.25
RECONNECT_SECONDS: Final = 2.0

logger = logging.getLogger(__name__)


class CommitNotifications:
    """A LISTEN connection in a thread of its own, calling ``wake`` on each NOTIFY."""

    def __init__(self, conninfo: str, channel: str, wake: Callable[[], None]) -> None:
        self._conninfo = conninfo
        self._channel = channel
        self._wake = wake
        self._stopping = threading.Event()
        self._thread = threading.Thread(
            target=self._listen, name="runledger-serve-listen", daemon=True
        )
        self.listening = threading.Event()
        """Set while the LISTEN connection is up (for tests and status)."""

    def start(self) -> None:
        """Start listening."""
        self._thread.start()

    def stop(self) -> None:
        """Stop listening and close the connection (within a fraction of a second)."""
        self._stopping.set()
        self._thread.join()

    def _listen(self) -> None:
        while not self._stopping.is_set():
            try:
                with psycopg.connect(self._conninfo, autocommit=True) as connection:
                    connection.execute(SQL("LISTEN {}").format(Identifier(self._channel)))
                    self.listening.set()
                    # The session heard nothing of commits before it (the first, or those
                    # made while the last connection was down): readers look once now.
                    self._wake()
                    self._follow(connection)
            except psycopg.Error as error:
                # The message names no password: libpq never puts one in its errors.
                logger.warning("LISTEN for live viewer streams failed, retrying: %s", error)
                self._stopping.wait(RECONNECT_SECONDS)
            finally:
                self.listening.clear()

    def _follow(self, connection: psycopg.Connection[Any]) -> None:
        # In slices, so that stop() is seen: libpq's wait cannot be interrupted.
        while not self._stopping.is_set():
            for _ in connection.notifies(timeout=SLICE_SECONDS):
                self._wake()
                if self._stopping.is_set():
                    return


def commit_notifications(
    runtime: StoreRuntime, wake: Callable[[], None]
) -> CommitNotifications | None:
    """The store's commit notifications, on PostgreSQL; None where there are none to hear
    (the other backends, a transaction pooler without ``listen_url``): the store's follower then
    finds other processes' commits on its idle look."""
    conninfo = runtime.listen_conninfo
    channel = getattr(getattr(runtime.storage, "events", None), "channel_name", None)
    if conninfo is None or not isinstance(channel, str):
        return None
    return CommitNotifications(conninfo, channel, wake)


__all__: Sequence[str] = ["CommitNotifications", "commit_notifications"]
