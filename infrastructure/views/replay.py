"""Scratch replays: a read model rebuilt from the log into process memory, up to a position.

Time travel (``as_of``) and ``projections verify`` read from one. It never touches the live
model: the rows go to a ``MemoryViewStore`` of its own, through the same runners, decoding
and upcasting (``projections.events.projected``) as live projection. An audit's
re-projection of a run's events (``audit.reprojection``) starts from the same scratch
runners (``scratch_runners``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from runledger.domain.errors import AsOfBeyondLogError, InvalidAsOfError
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.views.memory import MemoryViewStore
from runledger.infrastructure.views.projector import (
    DEFAULT_PAGE_SIZE,
    Progress,
    ProjectionRunner,
    run_pages,
)
from runledger.infrastructure.views.store import TrackingConflictError, ViewReaderBase
from runledger.projections.base import Projection

SCRATCH_PAGE_SECONDS = 1.0
"""Pages of a scratch replay commit to memory: only the page size bounds them."""
SCRATCH_CACHE_ROWS: Final = 1 << 62
"""Every row a scratch replay makes stays cached: the runner never asks the (empty) store."""


def check_as_of(as_of: object, head: int) -> int:
    """``as_of`` as a log position, or the error saying why it is not one."""
    if type(as_of) is not int or as_of < 0:
        raise InvalidAsOfError()
    if as_of > head:
        raise AsOfBeyondLogError(as_of=as_of, head=head)
    return as_of


def scratch_runners(
    projections: Sequence[Projection],
) -> tuple[MemoryViewStore, list[ProjectionRunner]]:
    """Fresh memory views, and a runner for each projection that knows every row there is."""
    views = MemoryViewStore(plain=True)
    runners = []
    for projection in projections:
        runner = ProjectionRunner(
            projection, views, SCRATCH_CACHE_ROWS, slot=views.ensure(projection)
        )
        runner.authoritative = True
        runners.append(runner)
    return views, runners


def _conflict(runners: Sequence[ProjectionRunner]) -> None:
    # Nobody else writes a scratch store: a conflict here is a bug, never a race.
    raise TrackingConflictError(runners[0].name if runners else "?", -1, -1)


def replay(
    storage: EventStorage,
    projections: Sequence[Projection],
    *,
    until: int | None,
    progress: Progress | None = None,
) -> ViewReaderBase:
    """A reader over the projections rebuilt in memory from the log up to ``until``.

    A projection that stalls on the way raises its error: a scratch model short of ``until``
    would answer as if the log ended earlier.
    """
    views, runners = scratch_runners(projections)
    run_pages(
        storage,
        views,
        runners,
        page_size=DEFAULT_PAGE_SIZE,
        page_seconds=SCRATCH_PAGE_SECONDS,
        progress=progress,
        should_stop=None,
        until=until,
        on_conflict=_conflict,
    )
    for runner in runners:
        if runner.failure is not None:
            raise runner.stall_error()
    return views.reader()
