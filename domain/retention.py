"""Which run trees retention may archive and prune (DESIGN.md "Retention").

A tree is settled when every run in it ended before the cutoff and nothing in it is still
live. Each aggregate of the tree answers for itself here, as its events leave it; the first
reason found keeps the tree, and the report names it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.effects import Effect
from runledger.domain.follow_ups import FollowUp
from runledger.domain.human_decisions import HumanDecision
from runledger.domain.runs import Run
from runledger.domain.session_segments import SessionSegment
from runledger.domain.values import EffectStatus
from runledger.domain.workflow_messages import WorkflowMessage

KeepReason = Literal[
    "run-not-ended",
    "finished-after-cutoff",
    "live-lease",
    "queued-follow-up",
    "undelivered-message",
    "unsettled-effect",
    "unresolved-decision",
    "capturing-segment",
    "changed-while-archiving",
]
"""Why a tree stays in the live store, in the order a tree's runs and aggregates are asked;
``changed-while-archiving``: a command wrote to the tree after it was judged settled."""

UNSETTLED_EFFECTS: Final[frozenset[EffectStatus]] = frozenset(
    {"applying", "retry_ready", "ambiguous"}
)
"""Effect statuses whose outcome is still open: pruning would lose the recovery they need.
``retry_ready`` is a failed or ambiguous effect allowed another attempt, so it is pending."""


def run_keep_reason(
    run: Run, *, settled_before: datetime, now: datetime
) -> tuple[KeepReason, str] | None:
    """Why the run keeps its tree (and the detail a report shows), or None if it does not."""
    if not run.has_ended or run.finished_at is None:
        return "run-not-ended", f"run {run.run_id} is {run.status}"
    if run.finished_at >= settled_before:
        return (
            "finished-after-cutoff",
            f"run {run.run_id} finished at {run.finished_at.isoformat()}",
        )
    if run.has_live_lease(now):
        expires = run.lease_expires_at.isoformat() if run.lease_expires_at else "never"
        return "live-lease", f"run {run.run_id} is claimed until {expires}"
    return None


def aggregate_keep_reason(aggregate: BaseAggregate[UUID]) -> tuple[KeepReason, str] | None:
    """Why a follow-up, message, effect, decision or segment keeps its tree, or None."""
    if isinstance(aggregate, FollowUp) and aggregate.state == "queued":
        return "queued-follow-up", f"follow-up {aggregate.follow_up_id} is queued"
    if isinstance(aggregate, WorkflowMessage) and aggregate.status == "pending":
        return (
            "undelivered-message",
            f"workflow message {aggregate.workflow_message_id} is not delivered",
        )
    if isinstance(aggregate, Effect) and aggregate.status in UNSETTLED_EFFECTS:
        return "unsettled-effect", f"effect {aggregate.effect_id} is {aggregate.status}"
    if isinstance(aggregate, HumanDecision) and aggregate.status == "pending":
        return "unresolved-decision", f"human decision {aggregate.decision_id} is pending"
    if isinstance(aggregate, SessionSegment) and aggregate.status == "recording":
        return "capturing-segment", f"session segment {aggregate.segment_id} is recording"
    return None
