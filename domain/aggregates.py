"""The aggregates one command works on: how rules that span several aggregates reach them.

The application's unit of work provides them from the store; ``AggregateSet`` holds them in
memory (the bench's generated histories, unit specifications). Either way an aggregate is
loaded at most once per command, and the aggregates keep the order in which they were first
loaded or added, which is the order their events are saved in.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from typing import TypeVar
from uuid import UUID

from eventsourcing.domain import BaseAggregate, CanMutateAggregate

from runledger.domain.effects import Effect, effect_aggregate_id
from runledger.domain.errors import (
    EffectNotFoundError,
    FollowUpNotFoundError,
    MessageNotFoundError,
    RunMissingError,
    SessionSegmentMissingError,
    SettingsScopeNotFoundError,
    TurnNotFoundError,
)
from runledger.domain.follow_ups import FollowUp, follow_up_aggregate_id
from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.session_segments import SessionSegment, segment_aggregate_id
from runledger.domain.settings_scopes import SettingsScope, settings_aggregate_id
from runledger.domain.turn_reservations import TurnReservation, turn_aggregate_id
from runledger.domain.workflow_messages import WorkflowMessage, message_aggregate_id

A = TypeVar("A", bound=BaseAggregate[UUID])
Missing = Callable[[object], Exception]


class Aggregates(ABC):
    """Loads aggregates by natural id (mapping "not found" to the domain's error) and adds new
    ones, so they are saved with the rest in one atomic save."""

    @abstractmethod
    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        """The aggregate with that id, or None when there is none of that class."""

    def get_or_assume_new(self, cls: type[A], aggregate_id: UUID) -> A | None:
        """The aggregate, or None; for a command that creates it when there is none.

        A unit of work that trusts what it has seen may answer None for an aggregate it has
        not seen, without reading: had it existed, the insert of its first version conflicts
        on the store's unique key, and the command runs again, reading.
        """
        return self.get(cls, aggregate_id)

    @abstractmethod
    def add(self, aggregate: A) -> A:
        """A new aggregate, saved after those loaded or added before it."""

    @abstractmethod
    def follow_ups_of(self, run_id: str) -> Iterator[FollowUp]:
        """The follow-ups queued on the run, in the order they were queued."""

    @abstractmethod
    def messages_of_source(self, source_id: str) -> Iterator[WorkflowMessage]:
        """The workflow messages created for a source id (any kind), oldest first."""

    @abstractmethod
    def settings_scopes_active_on(self, run_id: str) -> Iterator[SettingsScope]:
        """The settings scopes active on the run, in the order they became active on it."""

    @abstractmethod
    def restarts_in_tree(self, root_run_id: str) -> Iterator[Run]:
        """The restart children of every run with that root, in the order they were created."""

    def guard_settings_of(self, run: Run) -> None:
        """A settings scope becomes active on ``run`` in this command: its commit must be
        seen by a continuation child of the run created meanwhile, which takes every scope
        active on the run (``settings_scopes_active_on``), or come after the child's. Held
        aggregates have no one to race."""
        del run

    def find_run(self, run_id: str) -> Run | None:
        """The run with that id, or None."""
        return self.get(Run, run_aggregate_id(run_id))

    def run(self, run_id: object, missing: Missing = RunMissingError) -> Run:
        """The run; ``missing(run_id)`` when there is none (or the id is not text)."""
        return self._found(Run, run_aggregate_id, run_id, missing)

    def follow_up(self, follow_up_id: object) -> FollowUp:
        """The follow-up, or ``Workflow follow-up not found: <id>``."""
        return self._found(FollowUp, follow_up_aggregate_id, follow_up_id, FollowUpNotFoundError)

    def message(self, workflow_message_id: object) -> WorkflowMessage:
        """The workflow message, or ``Workflow message not found: <id>``."""
        return self._found(
            WorkflowMessage, message_aggregate_id, workflow_message_id, MessageNotFoundError
        )

    def reservation(self, workflow_turn_id: object) -> TurnReservation:
        """The turn's reservation, or ``Workflow turn not found: <id>``."""
        return self._found(TurnReservation, turn_aggregate_id, workflow_turn_id, TurnNotFoundError)

    def effect(self, effect_id: object) -> Effect:
        """The managed effect, or ``Managed effect not found: <id>``."""
        return self._found(Effect, effect_aggregate_id, effect_id, EffectNotFoundError)

    def segment(self, segment_id: str) -> SessionSegment:
        """The session segment, or ``Session capture segment is missing: <id>``."""
        return self._found(
            SessionSegment, segment_aggregate_id, segment_id, SessionSegmentMissingError
        )

    def settings_scope(self, scope_id: object) -> SettingsScope:
        """The settings scope, or ``Workflow settings scope not found: <id>``."""
        return self._found(
            SettingsScope, settings_aggregate_id, scope_id, SettingsScopeNotFoundError
        )

    def _found(
        self, cls: type[A], to_uuid: Callable[[str], UUID], natural_id: object, missing: Missing
    ) -> A:
        found = self.get(cls, to_uuid(natural_id)) if isinstance(natural_id, str) else None
        if found is None:
            raise missing(natural_id)
        return found


class AggregateSet(Aggregates):
    """Aggregates held in memory, with no store behind them.

    ``stored`` plays the store: an aggregate joins the set when it is first read, as in a
    unit of work, so the set's order (the save order) is the order a command reaches them.
    """

    def __init__(self, stored: Iterable[BaseAggregate[UUID]] = ()) -> None:
        self._stored = {aggregate.id: aggregate for aggregate in stored}
        self._aggregates: dict[UUID, BaseAggregate[UUID]] = {}

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        if aggregate_id not in self._aggregates and aggregate_id in self._stored:
            self._aggregates[aggregate_id] = self._stored[aggregate_id]
        found = self._aggregates.get(aggregate_id)
        return found if isinstance(found, cls) else None

    def add(self, aggregate: A) -> A:
        self._aggregates.pop(aggregate.id, None)
        self._aggregates[aggregate.id] = aggregate
        return aggregate

    def follow_ups_of(self, run_id: str) -> Iterator[FollowUp]:
        found = [a for a in self._everything(FollowUp) if a.run_id == run_id]
        return self._read(FollowUp, sorted(found, key=lambda follow_up: follow_up.order))

    def messages_of_source(self, source_id: str) -> Iterator[WorkflowMessage]:
        found = [a for a in self._everything(WorkflowMessage) if a.source_id == source_id]
        return self._read(WorkflowMessage, found)

    def restarts_in_tree(self, root_run_id: str) -> Iterator[Run]:
        found = [
            run
            for run in self._everything(Run)
            if run.root_run_id == root_run_id and run.lineage_kind == "restart"
        ]
        return self._read(Run, found)

    def settings_scopes_active_on(self, run_id: str) -> Iterator[SettingsScope]:
        found = [a for a in self._everything(SettingsScope) if a.active_run_id == run_id]
        return self._read(SettingsScope, found)

    def _everything(self, cls: type[A]) -> list[A]:
        every = {**self._stored, **self._aggregates}.values()
        return [aggregate for aggregate in every if isinstance(aggregate, cls)]

    def _read(self, cls: type[A], found: list[A]) -> Iterator[A]:
        # One at a time, as the unit of work reads an index: each joins the set when reached.
        for aggregate in found:
            read = self.get(cls, aggregate.id)
            if read is not None:
                yield read

    def __iter__(self) -> Iterator[BaseAggregate[UUID]]:
        """The aggregates read or added, in that order."""
        return iter(list(self._aggregates.values()))

    def collect_events(self) -> list[CanMutateAggregate[UUID]]:
        """Every pending event, aggregate by aggregate in save order, now no longer pending."""
        return [event for aggregate in self for event in aggregate.collect_events()]
