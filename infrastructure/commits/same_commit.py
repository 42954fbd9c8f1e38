"""The read-model step of a command's commit: the committing process's read models, projected
from the events in memory and written in the events' own transaction (DESIGN "Write path")."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from eventsourcing.persistence import StoredEvent

from runledger.infrastructure.commits.stats import CommitStats
from runledger.infrastructure.telemetry import SAME_COMMIT, TELEMETRY
from runledger.infrastructure.views.projector import Projector
from runledger.infrastructure.views.store import PageCommit

logger = logging.getLogger(__name__)


class SameCommitViews:
    """The ``SameCommit`` step of a process that projects: the pages of its events' read
    models, written in the events' transaction.

    The projector is taken when the step is first asked (``next_position`` or ``prepare``)
    and given back at ``settle``, by the thread that writes: with group commit that is the
    group's leader, which may not be the thread whose command made the step. Taken only if
    nobody here is projecting: a busy projector leaves the events to the catch-up after the
    commit.
    """

    def __init__(self, projector: Projector, stats: CommitStats) -> None:
        self.projector = projector
        self.stats = stats
        self.written = False
        self._pages: list[PageCommit] | None = None
        self._held = False

    def _hold(self) -> bool:
        if not self._held:
            self._held = self.projector.try_lock()
        return self._held

    def catch_up(self) -> None:
        # Never waits for the projector: the caller holds its aggregates' locks, and whoever
        # holds the projector may be waiting for one of them.
        if not self._hold():
            return
        try:
            self.projector.catch_up()
        except Exception:
            # Only a chance to write the views with the events is lost: they catch up after.
            logger.exception("read models not caught up before a command's commit")

    def next_position(self) -> int | None:
        return self.projector.next_position() if self._hold() else None

    def prepare(self, stored_events: Sequence[StoredEvent], positions: Sequence[int]) -> bool:
        self._pages = self.projector.pages_for(stored_events, positions) if self._hold() else None
        return self._pages is not None

    def write(self, cursor: Any) -> bool:
        if self._pages is None:
            return False
        return self.projector.views.write_with_events(cursor, self._pages)

    def settle(self, written: bool) -> None:
        pages, self._pages = self._pages, None
        try:
            if pages is not None:
                self.projector.settle(pages, written=written)
                if written:
                    self.stats.read_models_with_events += 1
        finally:
            if self._held:
                self._held = False
                self.projector.unlock()
        self.written = written


class SameCommitReadModels:
    """Gives each save of one store its read-model step (None: the events commit alone), and
    tells the thread that saved whether its read models committed with the events."""

    def __init__(
        self,
        projector: Projector | None,
        stats: CommitStats,
        *,
        projects: Callable[[], bool] = lambda: True,
    ) -> None:
        """``projector`` None: this process keeps no read models up to date itself;
        ``projects()`` False: not now (another process was elected to project)."""
        self._projector = projector
        self._projects = projects
        self._stats = stats
        self._written = threading.local()

    @contextmanager
    def step(self) -> Iterator[SameCommitViews | None]:
        """The step of one save (used for every commit, so each has its span)."""
        with TELEMETRY.commit():
            if self._projector is None or not self._projects():
                yield None
                return
            step = SameCommitViews(self._projector, self._stats)
            yield step
            self._written.done = step.written
            TELEMETRY.note(SAME_COMMIT, step.written)

    def took_last_commit(self) -> bool:
        """Whether this thread's last save committed its read models with its events (asked
        once per save: the answer is reset)."""
        done = bool(getattr(self._written, "done", False))
        self._written.done = False
        return done
