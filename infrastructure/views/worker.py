"""A projection worker: follows the log in its own process until told to stop.

On PostgreSQL it sleeps on LISTEN and wakes on the NOTIFY each insert sends (through a
transaction pooler only with a ``listen_url``: a pooled session is not the listener's for long);
because a notification can be lost, it also polls, so a missed wake-up delays a page by at most
one poll interval and never stalls the worker. A wait that opens a LISTEN session (the first,
or one after a dropped connection) returns at once (``Listener.wait``): commits made while
nobody listened woke nobody, so the worker looks at the log again. On SQLite
and memory it polls. Two workers (or a worker and embedded hosts) never double-apply a page:
each commit checks the positions it moves.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Final

from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.views.listener import Listener

DEFAULT_POLL_SECONDS: Final = 0.5
logger = logging.getLogger(__name__)


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

    def _make_listener(self) -> Listener | None:
        conninfo = self.runtime.listen_conninfo
        channel = getattr(self.runtime.storage.events, "channel_name", None)
        if conninfo is None or channel is None:
            return None
        return Listener(conninfo, channel)

    def stop(self, *_: object) -> None:
        """Ask the loop to stop after the page it is committing (safe from signal handlers)."""
        self.stopping.set()
        if self._listener is not None:
            self._listener.interrupt()

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
                self._listener.release()
