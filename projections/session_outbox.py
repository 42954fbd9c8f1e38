"""The session outbox: each Pi session's workflow messages in session order, and the next one
the host may deliver (upstream-behaviour §5.5; DESIGN.md decisions 7 and 12).

``apply`` keeps, besides the messages themselves, the few facts of runs, follow-ups and turns
that eligibility depends on, so a query never loads an aggregate. Every change is keyed; the
queries do the walking (lineage, earlier follow-ups, other runs of the session).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any, ClassVar, Final

from runledger.domain.follow_ups import FollowUp
from runledger.domain.lineage import MAX_LINEAGE_DEPTH
from runledger.domain.records import WorkflowMessageRecord
from runledger.domain.runs import Run
from runledger.domain.values import TERMINAL_STATUSES
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

RUNS: Final = Table(
    "rl_so_runs",
    columns=(
        ("run_id", "text"),
        ("status", "text"),
        ("paused", "bool"),
        ("parent_run_id", "text"),
        ("origin_session_id", "text"),
        ("created_at", "text"),
        ("created_position", "int"),
        ("terminal_message_id", "text"),
    ),
    key=("run_id",),
    indexes=(("parent_run_id",), ("origin_session_id", "status")),
    owner="run_id",
    clustered=True,
    positions=("created_position",),
)
"""What eligibility needs of a run: status, pause, lineage, origin and terminal message."""

FOLLOW_UPS: Final = Table(
    "rl_so_follow_ups",
    columns=(
        ("follow_up_id", "compact"),
        ("run_id", "text"),
        ("follow_up_order", "int"),
        ("state", "text"),
        ("workflow_message_id", "compact"),
    ),
    key=("follow_up_id",),
    indexes=(("run_id", "state", "follow_up_order"),),
    owner="run_id",
    clustered=True,
)
"""Each follow-up's state, its order within its run and its message."""

MESSAGES: Final = Table(
    "rl_so_messages",
    columns=(
        ("workflow_message_id", "compact"),
        ("target_session_id", "text"),
        ("session_order", "int"),
        ("run_id", "text"),
        ("kind", "text"),
        ("source_id", "compact"),
        # Kept packed: half a kilobyte of JSON a message, written once and read when the
        # message is delivered; on PostgreSQL it was 5.8 of a 55.6 MB store of 50k events.
        ("content", "packed"),
        ("content_digest", "compact"),
        ("status", "text"),
        ("pi_session_entry_id", "text"),
        ("created_at", "compact"),
        ("updated_at", "compact"),
        ("latest_turn_id", "compact"),
        ("latest_turn_state", "text"),
    ),
    key=("workflow_message_id",),
    # One index serves both reads: the next deliverable's (session, pending, order) range,
    # and the whole outbox of a session, which it reads whole and sorts by order. An index on
    # (session, order) alone would be one more page written with every message.
    indexes=(("target_session_id", "status", "session_order"),),
    dropped_indexes=(("target_session_id", "session_order"),),
    owner="run_id",
    session_order=("target_session_id", "session_order"),
)
"""Every workflow message with its session order, status and latest turn."""

SESSIONS: Final = Table(
    "rl_so_sessions",
    columns=(("target_session_id", "text"), ("last_order", "int")),
    key=("target_session_id",),
    # A counter per Pi session, shared by every run that targets it.
    owner=None,
    clustered=True,
)
"""The highest order given in each session, so the next message gets one more."""

ACTIVE_STATUSES: Final = ("queued", "running", "waiting")
PAGE_SIZE: Final = 100


def _update(view: ViewWriter, table: Table, key: str, changes: Mapping[str, Any]) -> None:
    row = view.get(table, (key,))
    if row is None:
        return
    if all(row[name] == value for name, value in changes.items()):
        # Most progress events change nothing this view keeps; skip the write.
        return
    row.update(changes)
    view.put(table, row)


def _run_created(event: ProjectedEvent, view: ViewWriter) -> None:
    view.put(
        RUNS,
        {
            "run_id": event["run_id"],
            "status": event["status"],
            "paused": False,
            "parent_run_id": event["parent_run_id"],
            "origin_session_id": None,
            "created_at": event.recorded_at,
            # Breaks ties between runs created at the same instant, identically on rebuild.
            "created_position": event.position,
            "terminal_message_id": None,
        },
    )


def _run_session_bound(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(view, RUNS, event["run_id"], {"origin_session_id": event["session_id"]})


def _run_progressed(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(view, RUNS, event["run_id"], {"status": event["status"]})


def _run_paused(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(view, RUNS, event["run_id"], {"paused": True})


def _run_resumed(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(view, RUNS, event["run_id"], {"paused": False})


def _run_finished(event: ProjectedEvent, view: ViewWriter) -> None:
    # A run ends once, so the message named here is its latest (and only) terminal message.
    _update(
        view,
        RUNS,
        event["run_id"],
        {
            "status": event["status"],
            "paused": False,
            "terminal_message_id": event["terminal_message_id"],
        },
    )


def _follow_up_queued(event: ProjectedEvent, view: ViewWriter) -> None:
    view.put(
        FOLLOW_UPS,
        {
            "follow_up_id": event["follow_up_id"],
            "run_id": event["run_id"],
            "follow_up_order": event["order"],
            "state": "queued",
            "workflow_message_id": event["workflow_message_id"],
        },
    )


def _follow_up_removed(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(view, FOLLOW_UPS, event["follow_up_id"], {"state": "removed"})


def _follow_up_cancelled(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(view, FOLLOW_UPS, event["follow_up_id"], {"state": "cancelled"})


def _message_created(event: ProjectedEvent, view: ViewWriter) -> None:
    # No look for an existing row: a message is created once (its first version, unique in
    # the log) and tracking gives each event to a view once, so the row cannot exist yet and
    # the session's next order is this message's.
    message_id = event["workflow_message_id"]
    session_id = event["target_session_id"]
    counter = view.get(SESSIONS, (session_id,))
    order = 1 if counter is None else counter["last_order"] + 1
    view.put(SESSIONS, {"target_session_id": session_id, "last_order": order})
    view.put(
        MESSAGES,
        {
            "workflow_message_id": message_id,
            "target_session_id": session_id,
            "session_order": order,
            "run_id": event["run_id"],
            "kind": event["kind"],
            "source_id": event["source_id"],
            "content": event["content"],
            "content_digest": event["content_digest"],
            "status": "pending",
            "pi_session_entry_id": None,
            "created_at": event.recorded_at,
            "updated_at": event.recorded_at,
            "latest_turn_id": None,
            "latest_turn_state": None,
        },
    )


# Every event of the message aggregate moves its updated_at, as the aggregate's modified_on.


def _message_cancelled(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(
        view,
        MESSAGES,
        event["workflow_message_id"],
        {"status": "cancelled", "updated_at": event.recorded_at},
    )


def _message_sent(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(
        view,
        MESSAGES,
        event["workflow_message_id"],
        {
            "status": "sent",
            "pi_session_entry_id": event["pi_session_entry_id"],
            "updated_at": event.recorded_at,
        },
    )


def _turn_started(event: ProjectedEvent, view: ViewWriter) -> None:
    _update(
        view,
        MESSAGES,
        event["workflow_message_id"],
        {
            "latest_turn_id": event["workflow_turn_id"],
            "latest_turn_state": "started",
            "updated_at": event.recorded_at,
        },
    )


def _turn_ended(event: ProjectedEvent, view: ViewWriter) -> None:
    row = view.get(MESSAGES, (event["workflow_message_id"],))
    if row is None:
        return
    # Only the latest turn decides eligibility; an older turn's end just touches the message.
    if row["latest_turn_id"] == event["workflow_turn_id"]:
        row["latest_turn_state"] = "ended"
    row["updated_at"] = event.recorded_at
    view.put(MESSAGES, row)


_HANDLERS: Final[Mapping[str, Handler]] = {
    Run.Created.TOPIC: _run_created,
    Run.SessionBound.TOPIC: _run_session_bound,
    Run.Progressed.TOPIC: _run_progressed,
    Run.Paused.TOPIC: _run_paused,
    Run.Resumed.TOPIC: _run_resumed,
    Run.Finished.TOPIC: _run_finished,
    FollowUp.Queued.TOPIC: _follow_up_queued,
    FollowUp.Removed.TOPIC: _follow_up_removed,
    FollowUp.Cancelled.TOPIC: _follow_up_cancelled,
    WorkflowMessage.Created.TOPIC: _message_created,
    WorkflowMessage.Cancelled.TOPIC: _message_cancelled,
    WorkflowMessage.Sent.TOPIC: _message_sent,
    WorkflowMessage.TurnStarted.TOPIC: _turn_started,
    WorkflowMessage.TurnEnded.TOPIC: _turn_ended,
}


class SessionOutboxProjection(HandledProjection):
    """Workflow messages per target session, in session order, with eligibility facts."""

    name: ClassVar[str] = "session_outbox"
    version: ClassVar[int] = 3
    # Version 2 keeps each message's content packed, version 3 its ids and times compact;
    # their rows are version 1's.
    same_rows_since: ClassVar[int | None] = 1
    tables: ClassVar[Sequence[Table]] = (RUNS, FOLLOW_UPS, MESSAGES, SESSIONS)
    rebuild_weight: ClassVar[int] = 2
    handlers = _HANDLERS


# -- queries ------------------------------------------------------------------------------


def session_outbox(reader: ViewReader, session_id: str) -> list[WorkflowMessageRecord]:
    """Every message targeting the session, in session order."""
    rows = reader.scan(MESSAGES, equals={"target_session_id": session_id}, order_by="session_order")
    return [_record(row) for row in rows]


def next_deliverable(reader: ViewReader, session_id: str) -> WorkflowMessageRecord | None:
    """The first message in session order that is eligible for delivery, or None."""
    after: int | None = None
    while True:
        rows = reader.scan(
            MESSAGES,
            equals={"target_session_id": session_id, "status": "pending"},
            order_by="session_order",
            after=after,
            limit=PAGE_SIZE,
        )
        for row in rows:
            if _eligible(reader, row):
                return _record(row)
        if len(rows) < PAGE_SIZE:
            return None
        after = rows[-1]["session_order"]


def _record(row: Row) -> WorkflowMessageRecord:
    # Trusted: the row was written from checked events; validating a session's 1,000
    # messages again was a sixth of its outbox read (cProfile, SQLite).
    return WorkflowMessageRecord.trusted(
        workflow_message_id=row["workflow_message_id"],
        run_id=row["run_id"],
        target_session_id=row["target_session_id"],
        kind=row["kind"],
        source_id=row["source_id"],
        content=row["content"],
        content_digest=row["content_digest"],
        status=row["status"],
        pi_session_entry_id=row["pi_session_entry_id"],
        created_at=datetime.fromisoformat(row["created_at"]),
        updated_at=datetime.fromisoformat(row["updated_at"]),
        order=row["session_order"],
    )


def _eligible(reader: ViewReader, message: Row) -> bool:
    """Upstream §5.5 for a pending message; interaction requests are not modelled yet, so a
    step or decision counts as pending while its message is (DESIGN decision 12)."""
    kind = message["kind"]
    if kind in ("notification", "decision"):
        return True
    if kind == "followUp":
        return _follow_up_eligible(reader, message)
    run = reader.get(RUNS, (message["run_id"],))
    if run is None:
        return False
    if kind == "step":
        return not run["paused"]
    if kind == "terminal":
        return run["status"] in TERMINAL_STATUSES
    return False


def _follow_up_eligible(reader: ViewReader, message: Row) -> bool:
    """Rules 1-5 of upstream §5.5 for a follow-up message, in upstream's order."""
    follow_up = reader.get(FOLLOW_UPS, (message["source_id"],))
    if follow_up is None or follow_up["state"] != "queued":
        return False
    run = reader.get(RUNS, (follow_up["run_id"],))
    if run is None:
        return False
    leaf = _terminal_chain_leaf(reader, run)
    if leaf["status"] != "completed":
        return False
    terminal = _message(reader, leaf["terminal_message_id"])
    if terminal is None or terminal["status"] != "sent" or not _latest_turn_ended(terminal):
        return False
    earlier_queued = reader.scan(
        FOLLOW_UPS,
        equals={"run_id": run["run_id"], "state": "queued"},
        order_by="follow_up_order",
        descending=True,
        after=follow_up["follow_up_order"],
    )
    # Removed and cancelled follow-ups never block; a queued one blocks until its turn ended.
    for earlier in earlier_queued:
        earlier_message = _message(reader, earlier["workflow_message_id"])
        if earlier_message is None or not _latest_turn_ended(earlier_message):
            return False
    return not _other_active_run(reader, run["run_id"], message["target_session_id"])


def _terminal_chain_leaf(reader: ViewReader, run: Row) -> Row:
    """The deepest descendant via parent_run_id (the run itself if it has none); among the
    deepest, the newest created."""
    deepest = [run]
    for _ in range(MAX_LINEAGE_DEPTH):
        children = reader.scan(
            RUNS, within={"parent_run_id": [parent["run_id"] for parent in deepest]}
        )
        if not children:
            break
        deepest = children
    return max(
        deepest,
        key=lambda row: (datetime.fromisoformat(row["created_at"]), row["created_position"]),
    )


def _message(reader: ViewReader, workflow_message_id: str | None) -> Row | None:
    if workflow_message_id is None:
        return None
    return reader.get(MESSAGES, (workflow_message_id,))


def _latest_turn_ended(message: Row) -> bool:
    ended: bool = message["latest_turn_state"] == "ended"
    return ended


def _other_active_run(reader: ViewReader, run_id: str, session_id: str) -> bool:
    # A follow-up targets its run's origin session (queueing checks it), so the message's
    # session is the origin session whose other runs must all be settled.
    active = reader.scan(
        RUNS,
        equals={"origin_session_id": session_id},
        within={"status": ACTIVE_STATUSES},
        limit=2,
    )
    return any(row["run_id"] != run_id for row in active)
