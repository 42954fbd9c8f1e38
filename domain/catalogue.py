"""The event catalogue: every wire name runledger writes, and the only topics it reads.

A wire name is permanent: never renamed, never reused. Schema changes go through
``class_version`` and ``upcast_vN_vN+1`` on the event class.
"""

from __future__ import annotations

from typing import Final
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.effects import Effect
from runledger.domain.events import LedgerEvent, LedgerSnapshot
from runledger.domain.follow_ups import FollowUp
from runledger.domain.human_decisions import HumanDecision
from runledger.domain.run_tree_archives import RunTreeArchive
from runledger.domain.runs import Run
from runledger.domain.session_segments import SessionSegment
from runledger.domain.settings_scopes import SettingsScope
from runledger.domain.turn_reservations import TurnReservation
from runledger.domain.workflow_messages import WorkflowMessage

AGGREGATES: Final[tuple[type[BaseAggregate[UUID]], ...]] = (
    Run,
    FollowUp,
    WorkflowMessage,
    TurnReservation,
    HumanDecision,
    SessionSegment,
    Effect,
    SettingsScope,
    RunTreeArchive,
)

DOMAIN_EVENTS: Final[tuple[type[LedgerEvent], ...]] = (
    Run.Created,
    Run.SessionBound,
    Run.Progressed,
    Run.Paused,
    Run.Resumed,
    Run.PresentationInstructionsSet,
    Run.FollowUpAccepted,
    Run.Finished,
    Run.RestartChildCreated,
    Run.ContinuationEnded,
    FollowUp.Queued,
    FollowUp.Removed,
    FollowUp.Cancelled,
    WorkflowMessage.Created,
    WorkflowMessage.Cancelled,
    WorkflowMessage.Sent,
    WorkflowMessage.TurnStarted,
    WorkflowMessage.TurnEnded,
    TurnReservation.Reserved,
    HumanDecision.Requested,
    HumanDecision.AnswerSubmitted,
    HumanDecision.Accepted,
    HumanDecision.Cancelled,
    HumanDecision.ContinuationCreated,
    Run.Claimed,
    Run.ClaimRenewed,
    Run.ClaimReleased,
    SessionSegment.Created,
    SessionSegment.EntryAppended,
    SessionSegment.EventsAppended,
    SessionSegment.CaptureUpdated,
    Effect.Reserved,
    Effect.AttemptStarted,
    Effect.Settled,
    Effect.RetryReady,
    Effect.BecameAmbiguous,
    Run.UpdatePublished,
    SettingsScope.Created,
    SettingsScope.Changed,
    SettingsScope.Moved,
    RunTreeArchive.Archived,
    RunTreeArchive.Restored,
)

SNAPSHOTS: Final[tuple[type[LedgerSnapshot], ...]] = (
    Run.Snapshot,
    FollowUp.Snapshot,
    WorkflowMessage.Snapshot,
    TurnReservation.Snapshot,
    HumanDecision.Snapshot,
    SessionSegment.Snapshot,
    Effect.Snapshot,
    SettingsScope.Snapshot,
    RunTreeArchive.Snapshot,
)

WIRE_NAMES: Final[tuple[str, ...]] = tuple(event.TOPIC for event in DOMAIN_EVENTS)

EVENT_CLASSES: Final[dict[str, type[LedgerEvent] | type[LedgerSnapshot]]] = {
    **{event.TOPIC: event for event in DOMAIN_EVENTS},
    **{snapshot.TOPIC: snapshot for snapshot in SNAPSHOTS},
}
