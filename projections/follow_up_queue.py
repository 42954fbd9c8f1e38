"""The follow-up queue read model: every follow-up of a run in order, with its delivery.

Upstream §4.4 and §4.9: a run's queue exists only once the run has an origin session; it
lists all of the run's own follow-ups (any state) by order number, and each item's
``delivery`` is the status of its latest ``followUp`` workflow message, never inferred from
the follow-up's state.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import ClassVar, Final

from runledger.domain.errors import InvalidPageError
from runledger.domain.follow_ups import FollowUp
from runledger.domain.records import FollowUpQueue, FollowUpRecord
from runledger.domain.runs import Run
from runledger.domain.values import Actor, is_count
from runledger.domain.workflow_messages import WorkflowMessage
from runledger.projections.base import (
    HandledProjection,
    Handler,
    ProjectedEvent,
    Row,
    Table,
    ViewReader,
    ViewWriter,
)

FOLLOW_UP_KIND: Final = "followUp"

RUNS: Final = Table(
    name="rl_fuq_runs",
    columns=(("run_id", "text"), ("origin_session_id", "text")),
    key=("run_id",),
    owner="run_id",
    clustered=True,
)

# ``order`` is an SQL keyword, hence ``order_number`` (upstream's column name too).
FOLLOW_UPS: Final = Table(
    name="rl_fuq_follow_ups",
    columns=(
        ("follow_up_id", "text"),
        ("run_id", "text"),
        ("request_id", "text"),
        ("order_number", "int"),
        ("target_session_id", "text"),
        ("actor_type", "text"),
        ("actor_id", "text"),
        ("source", "text"),
        ("prompt", "text"),
        ("state", "text"),
        ("reason", "text"),
        ("created_at", "text"),
        ("updated_at", "text"),
        ("workflow_message_id", "text"),
        ("delivery", "text"),
    ),
    key=("follow_up_id",),
    indexes=(("run_id", "order_number"),),
    owner="run_id",
)


def _run_created(event: ProjectedEvent, view: ViewWriter) -> None:
    view.put(RUNS, {"run_id": event["run_id"], "origin_session_id": None})


def _session_bound(event: ProjectedEvent, view: ViewWriter) -> None:
    # The run row has no other column and the first binding is the only one the domain
    # records, so a blind put is exact and saves a read.
    view.put(RUNS, {"run_id": event["run_id"], "origin_session_id": event["session_id"]})


def _follow_up_queued(event: ProjectedEvent, view: ViewWriter) -> None:
    actor = event["actor"]
    view.put(
        FOLLOW_UPS,
        {
            "follow_up_id": event["follow_up_id"],
            "run_id": event["run_id"],
            "request_id": event["request_id"],
            "order_number": event["order"],
            "target_session_id": event["target_session_id"],
            "actor_type": actor["type"],
            "actor_id": actor.get("id"),
            "source": event["source"],
            "prompt": event["prompt"],
            "state": "queued",
            "reason": None,
            "created_at": event.recorded_at,
            "updated_at": event.recorded_at,
            # The queue command creates this message, pending, in the same commit; starting
            # from it means a page boundary between the two events never shows no delivery.
            "workflow_message_id": event["workflow_message_id"],
            "delivery": "pending",
        },
    )


def _follow_up_ended(event: ProjectedEvent, view: ViewWriter) -> None:
    """Removed or cancelled: both carry the final state's reason."""
    row = view.get(FOLLOW_UPS, (event["follow_up_id"],))
    if row is None:
        return
    row["state"] = "removed" if event.wire_name == FollowUp.Removed.TOPIC else "cancelled"
    row["reason"] = event["reason"]
    # Only follow-up events move updated_at, as they do the aggregate's modified_on.
    row["updated_at"] = event.recorded_at
    view.put(FOLLOW_UPS, row)


def _message_created(event: ProjectedEvent, view: ViewWriter) -> None:
    if event["kind"] != FOLLOW_UP_KIND:
        return
    row = view.get(FOLLOW_UPS, (event["source_id"],))
    if row is None:
        return
    message_id = event["workflow_message_id"]
    if row["workflow_message_id"] == message_id:
        return
    # A newer message for the same follow-up becomes the one its delivery follows.
    row["workflow_message_id"] = message_id
    row["delivery"] = "pending"
    view.put(FOLLOW_UPS, row)


def _message_settled(event: ProjectedEvent, view: ViewWriter) -> None:
    """Sent or cancelled; a cancelled message can still turn sent later (evidence wins)."""
    if event["kind"] != FOLLOW_UP_KIND:
        return
    row = view.get(FOLLOW_UPS, (event["source_id"],))
    # An older, superseded message no longer decides the follow-up's delivery.
    if row is None or row["workflow_message_id"] != event["workflow_message_id"]:
        return
    row["delivery"] = "sent" if event.wire_name == WorkflowMessage.Sent.TOPIC else "cancelled"
    view.put(FOLLOW_UPS, row)


_HANDLERS: Final[dict[str, Handler]] = {
    Run.Created.TOPIC: _run_created,
    Run.SessionBound.TOPIC: _session_bound,
    FollowUp.Queued.TOPIC: _follow_up_queued,
    FollowUp.Removed.TOPIC: _follow_up_ended,
    FollowUp.Cancelled.TOPIC: _follow_up_ended,
    WorkflowMessage.Created.TOPIC: _message_created,
    WorkflowMessage.Sent.TOPIC: _message_settled,
    WorkflowMessage.Cancelled.TOPIC: _message_settled,
}


class FollowUpQueueProjection(HandledProjection):
    """Projects runs' origin sessions and their follow-ups with delivery state."""

    name: ClassVar[str] = "follow_up_queue"
    version: ClassVar[int] = 1
    tables: ClassVar[Sequence[Table]] = (RUNS, FOLLOW_UPS)
    rebuild_weight: ClassVar[int] = 2
    handlers = _HANDLERS


def follow_up_queue(reader: ViewReader, run_id: str) -> FollowUpQueue | None:
    """The run's whole queue in order; None when the run is unknown or has no origin session."""
    origin = _origin_session(reader, run_id)
    if origin is None:
        return None
    rows = reader.scan(FOLLOW_UPS, equals={"run_id": run_id}, order_by="order_number")
    return _queue(run_id, origin, rows)


def follow_up_queue_range(
    reader: ViewReader, run_id: str, *, start: int, limit: int
) -> FollowUpQueue | None:
    """The queue with only the follow-ups at offsets ``start`` .. ``start + limit - 1``."""
    for name, value in (("follow-up start", start), ("follow-up limit", limit)):
        if not is_count(value):
            raise InvalidPageError(name)
    origin = _origin_session(reader, run_id)
    if origin is None:
        return None
    # Order numbers run 1..n per run without gaps, so offset ``start`` is the first order
    # number beyond ``start``: a keyed range read, however long the queue.
    rows = reader.scan(
        FOLLOW_UPS,
        equals={"run_id": run_id},
        order_by="order_number",
        after=start,
        limit=limit,
    )
    return _queue(run_id, origin, rows)


def _origin_session(reader: ViewReader, run_id: str) -> str | None:
    if not isinstance(run_id, str):
        return None
    run = reader.get(RUNS, (run_id,))
    if run is None:
        return None
    origin: str | None = run["origin_session_id"]
    return origin


# The rows were validated when their events were; pages of 256 records are built without
# validating each field again (it was most of a page read's time).


def _queue(run_id: str, origin_session_id: str, rows: list[Row]) -> FollowUpQueue:
    return FollowUpQueue.trusted(
        run_id=run_id,
        origin_session_id=origin_session_id,
        follow_ups=[_record(row) for row in rows],
    )


def _record(row: Row) -> FollowUpRecord:
    return FollowUpRecord.trusted(
        follow_up_id=row["follow_up_id"],
        run_id=row["run_id"],
        request_id=row["request_id"],
        order=row["order_number"],
        target_session_id=row["target_session_id"],
        actor=Actor(row["actor_type"], row["actor_id"]),
        source=row["source"],
        prompt=row["prompt"],
        state=row["state"],
        reason=row["reason"],
        created_at=datetime.fromisoformat(row["created_at"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        delivery=row["delivery"],
    )
