"""On PostgreSQL, other processes' commits wake the broadcaster through LISTEN/NOTIFY.

Every insert into the event log sends a NOTIFY on the log's channel. This thread LISTENs on
it with a connection of its own and calls ``wake`` for each notification, so another
process's command reaches the live streams at once rather than at the store follower's next
look (about once a second, which stays as the safety net for a lost notification or a
dropped connection). The broadcaster reads through the store, which projects anything not
yet projected first, so being woken before the other process projected is harmless.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Final

from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.views.listener import Listener

WAIT_SECONDS: Final = 60.0
"""How long one wait on the listener lasts at most; ``stop`` interrupts it at once."""


class CommitNotifications:
    """A ``Listener`` in a thread of its own, calling ``wake`` on each NOTIFY, and once on
    each new LISTEN session (commits made before it notified nobody), as a projection worker
    looks at the log then."""

    def __init__(self, conninfo: str, channel: str, wake: Callable[[], None]) -> None:
        self._listener = Listener(conninfo, channel)
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
        """Stop listening and close the connection (at once: the wait is interrupted)."""
        self._stopping.set()
        self._listener.interrupt()
        self._thread.join()
        self._listener.release()

    def _listen(self) -> None:
        # The listener reconnects after failures and logs them (no password: libpq never
        # puts one in its errors); the store's follower's idle look covers the gaps.
        while not self._stopping.is_set():
            woken = self._listener.wait(WAIT_SECONDS, self._stopping)
            if self._listener.connected:
                self.listening.set()
            else:
                self.listening.clear()
            if woken:
                self._wake()
        self.listening.clear()


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
