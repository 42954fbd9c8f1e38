"""Re-projecting a selection of events from scratch into views in memory.

The same projections and the same runner the live store uses, over a fresh
``MemoryViewStore``; the events come from a list rather than the log, so a run's events can be
re-projected alone, and a bundle's without any store. A projection that fails on an event is
stalled there, as live, and the stall is part of the result: it is never stepped over.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from runledger.domain.ports import LogEntry
from runledger.infrastructure.views.digest import view_digest
from runledger.infrastructure.views.memory import MemoryViewStore
from runledger.infrastructure.views.projector import project_page
from runledger.infrastructure.views.replay import scratch_runners
from runledger.infrastructure.views.store import ViewReaderBase
from runledger.projections.base import Projection

PAGE_SIZE: Final = 1000


@dataclass(frozen=True)
class Reprojection:
    """The re-projected views, and each stalled projection's failure."""

    projections: Sequence[Projection]
    views: MemoryViewStore
    stalls: dict[str, str]
    events: int

    def reader(self) -> ViewReaderBase:
        """Read access to the re-projected rows."""
        return self.views.reader()

    def digests(self) -> dict[str, dict[str, Any]]:
        """Each model's name -> its version and digest (or, when it stalled, its failure)."""
        reader = self.reader()
        result: dict[str, dict[str, Any]] = {}
        for projection in self.projections:
            stall = self.stalls.get(projection.name)
            outcome: dict[str, Any] = {"version": projection.version}
            if stall is None:
                outcome["digest"] = view_digest(projection, reader)
            else:
                outcome["stalled"] = stall
            result[projection.name] = outcome
        return result


def reproject(
    entries: Iterable[LogEntry],
    projections: Sequence[Projection],
    *,
    progress: Callable[[int], None] | None = None,
) -> Reprojection:
    """Project ``entries`` (in log order) into fresh memory views, page by page."""
    views, runners = scratch_runners(projections)
    count = 0
    pages = iter(entries)
    while page := list(itertools.islice(pages, PAGE_SIZE)):
        # The live projector's page step: a page is never cut short by time here.
        project_page(views, [runner for runner in runners if runner.projecting], page, math.inf)
        count += len(page)
        if progress is not None:
            progress(len(page))
    stalls = {runner.name: runner.failure for runner in runners if runner.failure is not None}
    return Reprojection(projections, views, stalls, count)
