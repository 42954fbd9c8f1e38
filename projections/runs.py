"""The runs read model: every run with its status and lineage, for run pickers and indexes.

Upstream ``listRuns`` / ``readDisplayState`` (DESIGN ``list_runs``): runs in creation order,
keyset-paged on the log position of their ``run.created`` (unique and increasing), so a page
is one indexed range read however many runs exist, and a page never shifts when runs are
added.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar, Final

from runledger.domain.catalogue import DOMAIN_EVENTS
from runledger.domain.errors import InvalidPageError, InvalidRunStatusError, UnknownRunCursorError
from runledger.domain.records import RunPage, RunSummary
from runledger.domain.runs import Run
from runledger.domain.values import RUN_STATUSES, RunStatus, is_one_of
from runledger.projections.base import (
    HandledProjection,
    Handler,
    ProjectedEvent,
    Row,
    Table,
    ViewReader,
    ViewWriter,
)

MAX_PAGE: Final = 1000

RUNS: Final = Table(
    name="rl_runs",
    columns=(
        ("run_id", "text"),
        ("position", "int"),
        ("workflow_name", "text"),
        ("workflow_ref", "text"),
        ("title", "text"),
        ("status", "text"),
        ("paused", "bool"),
        ("origin_session_id", "text"),
        ("parent_run_id", "text"),
        ("root_run_id", "text"),
        ("lineage_kind", "text"),
        ("restart_number", "int"),
        ("created_at", "text"),
        ("updated_at", "text"),
        ("finished_at", "text"),
    ),
    key=("run_id",),
    indexes=(
        ("position",),
        ("status", "position"),
        ("origin_session_id", "position"),
        ("root_run_id", "position"),
    ),
    owner="run_id",
    positions=("position",),
)


def _run_created(event: ProjectedEvent, view: ViewWriter) -> None:
    status = event["status"]
    view.put(
        RUNS,
        {
            "run_id": event["run_id"],
            "position": event.position,
            "workflow_name": event["workflow_name"],
            "workflow_ref": event["workflow_ref"],
            "title": event["title"],
            "status": status,
            "paused": False,
            "origin_session_id": None,
            "parent_run_id": event["parent_run_id"],
            "root_run_id": event["root_run_id"],
            "lineage_kind": event["lineage_kind"],
            "restart_number": event["restart_number"],
            "created_at": event.recorded_at,
            "updated_at": event.recorded_at,
            "finished_at": event.recorded_at if status == "waiting" else None,
        },
    )


def _changes(event: ProjectedEvent) -> dict[str, Any]:
    """What a run event changes in the list, mirroring the Run aggregate's ``apply``."""
    name = event.wire_name
    if name == Run.SessionBound.TOPIC:
        return {"origin_session_id": event["session_id"]}
    if name == Run.Progressed.TOPIC:
        waiting = event["status"] == "waiting"
        return {"status": event["status"], "finished_at": event.recorded_at if waiting else None}
    if name == Run.Paused.TOPIC:
        return {"paused": True}
    if name == Run.Resumed.TOPIC:
        return {"paused": False}
    if name == Run.Finished.TOPIC:
        return {"status": event["status"], "paused": False, "finished_at": event.recorded_at}
    return {}


def _run_changed(event: ProjectedEvent, view: ViewWriter) -> None:
    row = view.get(RUNS, (event["run_id"],))
    if row is None:
        return
    row.update(_changes(event))
    # Every run event moves updated_at, as it moves the aggregate's modified_on.
    row["updated_at"] = event.recorded_at
    view.put(RUNS, row)


_RUN_EVENTS: Final = tuple(
    event for event in DOMAIN_EVENTS if issubclass(event, Run.Event) and event is not Run.Created
)
"""Every run event after ``run.created``: each one moves the run's ``updated_at``."""

_HANDLERS: Final[dict[str, Handler]] = {
    Run.Created.TOPIC: _run_created,
    **{event.TOPIC: _run_changed for event in _RUN_EVENTS},
}


class RunsProjection(HandledProjection):
    """Projects every run's list entry: status, pause, lineage, origin session and times."""

    name: ClassVar[str] = "runs"
    version: ClassVar[int] = 1
    tables: ClassVar[Sequence[Table]] = (RUNS,)
    handlers = _HANDLERS


def list_runs(
    reader: ViewReader,
    *,
    status: RunStatus | None = None,
    session_id: str | None = None,
    root_run_id: str | None = None,
    after: str | None = None,
    limit: int = 100,
) -> RunPage:
    """Runs in creation order, filtered, from just after the run ``after``."""
    _check_page(status, limit)
    equals = {
        column: value
        for column, value in (
            ("status", status),
            ("origin_session_id", session_id),
            ("root_run_id", root_run_id),
        )
        if value is not None
    }
    return _keyset_page(reader, equals, after, limit, descending=False)


def _check_page(status: object, limit: object) -> None:
    """A page's size first, then its status filter: both are checked before any read."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 0 <= limit <= MAX_PAGE:
        raise InvalidPageError(f"runs page limit (at most {MAX_PAGE})")
    if status is not None and not is_one_of(status, RUN_STATUSES):
        # An unknown status would match no run: the caller's typo must not read as "none".
        raise InvalidRunStatusError(status=status, allowed=", ".join(RUN_STATUSES))


def _keyset_page(
    reader: ViewReader, equals: dict[str, Any], after: object, limit: int, *, descending: bool
) -> RunPage:
    """Up to ``limit`` runs matching ``equals`` beyond the run ``after`` in creation order (or
    its reverse): one indexed range read on the position of their ``run.created``."""
    start = None
    if after is not None:
        cursor = reader.get(RUNS, (after,)) if isinstance(after, str) else None
        if cursor is None:
            raise UnknownRunCursorError(after)
        start = cursor["position"]
    # One row more than asked tells whether another page follows.
    rows = reader.scan(
        RUNS,
        equals=equals,
        order_by="position",
        descending=descending,
        after=start,
        limit=limit + 1,
    )
    page = rows[:limit]
    more = len(rows) > limit and bool(page)
    return RunPage.trusted(
        runs=[_summary(row) for row in page],
        next_after=page[-1]["run_id"] if more else None,
    )


# Rows were validated when their events were: a page is built without validating each field
# again (that was most of a page read's time), as the follow-up queue does.


def _summary(row: Row) -> RunSummary:
    finished = row["finished_at"]
    return RunSummary.trusted(
        run_id=row["run_id"],
        workflow_name=row["workflow_name"],
        workflow_ref=row["workflow_ref"],
        title=row["title"],
        status=row["status"],
        paused=row["paused"],
        origin_session_id=row["origin_session_id"],
        parent_run_id=row["parent_run_id"],
        root_run_id=row["root_run_id"],
        lineage_kind=row["lineage_kind"],
        restart_number=row["restart_number"],
        created_at=datetime.fromisoformat(row["created_at"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        finished_at=None if finished is None else datetime.fromisoformat(finished),
    )


# -- the console's runs list -----------------------------------------------------------------

FILTERS: Final = ("status", "workflow_name", "origin_session_id", "root_run_id", "run_id")
"""The columns the console's runs list filters on, each by equality."""


def newest_runs(
    reader: ViewReader,
    *,
    filters: dict[str, str],
    before: str | None = None,
    limit: int = 50,
) -> RunPage:
    """Runs newest first, filtered by equality on ``FILTERS`` columns, from just before the
    run ``before``: the same keyset as ``list_runs``, read the other way."""
    _check_page(filters.get("status"), limit)
    return _keyset_page(reader, filters, before, limit, descending=True)


def runs_by_id(reader: ViewReader, run_ids: Sequence[str]) -> list[RunSummary]:
    """The list entries of these runs (unknown ones left out), in creation order."""
    rows = reader.scan(RUNS, within={"run_id": list(run_ids)}, order_by="position")
    return [_summary(row) for row in rows]


def count_runs(reader: ViewReader, *, filters: dict[str, str]) -> dict[str, int]:
    """How many runs match ``filters``, by status (every status, zeros included)."""
    _check_page(filters.get("status"), 0)
    equals = dict(filters)
    given = equals.pop("status", None)
    statuses: Sequence[str] = RUN_STATUSES if given is None else (given,)
    return {status: reader.count(RUNS, equals={**equals, "status": status}) for status in statuses}
