"""The TurnReservation aggregate: claims a workflow turn id for exactly one message.

A turn lives inside its WorkflowMessage, but callers name turns by their own ids. Creating
this aggregate (id derived from the turn id) in the same commit as the turn makes the id
unique across messages under concurrency, and lets ``end_turn(turn_id)`` find the message.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.errors import InvalidTurnIdError
from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id
from runledger.domain.values import Actor


def turn_aggregate_id(workflow_turn_id: str) -> UUID:
    return aggregate_id("workflow-turn", workflow_turn_id)


def check_turn_id(workflow_turn_id: object) -> str | None:
    """A caller's own turn id is non-empty text; None asks for the message's next default."""
    if workflow_turn_id is not None and (
        not isinstance(workflow_turn_id, str) or not workflow_turn_id
    ):
        raise InvalidTurnIdError()
    return workflow_turn_id


class TurnReservation(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """Maps one turn id to the message that owns the turn."""

    TOPIC = "workflow-turn-reservation"

    workflow_turn_id: str
    workflow_message_id: str
    run_id: str
    target_session_id: str

    def __init__(self) -> None:
        """State is set by the Reserved event."""

    class Event(LedgerEvent):
        """Base of every TurnReservation event."""

    class Reserved(Event, LedgerCreated):
        """A turn id was claimed for the message that owns the turn."""

        TOPIC = "workflow-turn.reserved"
        workflow_turn_id: str
        workflow_message_id: str
        target_session_id: str

        def apply(self, reservation: TurnReservation) -> None:
            reservation.workflow_turn_id = self.workflow_turn_id
            reservation.workflow_message_id = self.workflow_message_id
            reservation.run_id = self.run_id
            reservation.target_session_id = self.target_session_id

    class Snapshot(LedgerSnapshot):
        """The reservation at a version."""

        TOPIC = "workflow-turn-reservation.snapshot"

    @classmethod
    def reserve(
        cls,
        workflow_turn_id: str,
        *,
        workflow_message_id: str,
        run_id: str,
        target_session_id: str,
        actor: Actor,
        now: datetime,
    ) -> TurnReservation:
        """Claim the turn id for the message that owns the turn."""
        return cls._create(
            cls.Reserved,
            id=turn_aggregate_id(workflow_turn_id),
            timestamp=now,
            actor=actor.to_json(),
            run_id=run_id,
            workflow_turn_id=workflow_turn_id,
            workflow_message_id=workflow_message_id,
            target_session_id=target_session_id,
        )

    def matches(
        self, *, workflow_message_id: object, run_id: object, target_session_id: object
    ) -> bool:
        """Whether a repeated start names the same message, run and session."""
        return (
            workflow_message_id == self.workflow_message_id
            and run_id == self.run_id
            and target_session_id == self.target_session_id
        )
