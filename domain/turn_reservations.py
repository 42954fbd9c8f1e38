"""The TurnReservation aggregate: claims a workflow turn id for exactly one message.

A turn lives inside its WorkflowMessage, but callers name turns by their own ids. Creating
this aggregate (id derived from the turn id) in the same commit as the turn makes the id
unique across messages under concurrency, and lets ``end_turn(turn_id)`` find the message.
"""

from __future__ import annotations

from datetime import datetime
from uuid import UUID

from eventsourcing.domain import BaseAggregate

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
        pass

    class Reserved(Event, LedgerCreated):
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
        return (
            workflow_message_id == self.workflow_message_id
            and run_id == self.run_id
            and target_session_id == self.target_session_id
        )
