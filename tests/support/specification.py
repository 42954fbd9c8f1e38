"""Given/when/then specifications for aggregates, in the style of Emmett's DeciderSpecification.

One aggregate: ``given(Run, history)`` rebuilds it by applying recorded events,
``.when(command)`` runs one command on it. Several aggregates (the rules that span them:
the end-of-run cascade, restarts, the outbox): ``given_events(history)`` rebuilds every
aggregate the events name into an in-memory ``AggregateSet``, and ``.when(command)`` runs a
domain function on that set. A history holds event objects (``events_of``, ``history_of``)
or ``(wire_name, payload)`` pairs, decoded through the event catalogue as stored events are.

``.then([(wire_name, payload_subset), ...])`` checks the events the command added (in save
order), or ``.then_raises(ErrorClass, "exact message")`` checks the error and that nothing
was added. No database is involved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any, Final, Generic, TypeVar
from uuid import UUID

import orjson
from eventsourcing.domain import BaseAggregate, CanMutateAggregate
from eventsourcing.persistence import StoredEvent

from runledger.domain.aggregates import AggregateSet
from runledger.domain.catalogue import EVENT_CLASSES
from runledger.domain.follow_ups import FollowUp, follow_up_aggregate_id
from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.turn_reservations import TurnReservation, turn_aggregate_id
from runledger.domain.workflow_messages import WorkflowMessage, message_aggregate_id
from runledger.infrastructure.commits.mapper import LedgerMapper

A = TypeVar("A", bound=BaseAggregate[UUID])
S = TypeVar("S")
Event = CanMutateAggregate[UUID]
Expected = Sequence[tuple[str, Mapping[str, Any]]]
GivenEvent = Event | tuple[str, Mapping[str, Any]]

_MISSING = "<missing>"
GIVEN_AT: Final = datetime(2026, 1, 1, tzinfo=UTC)
"""When a ``(wire_name, payload)`` event happened, unless its payload says."""

# Each aggregate's event base, the natural id field its events carry, and its aggregate UUID.
_IDENTITIES: Final[tuple[tuple[type, str, Callable[[str], UUID]], ...]] = (
    (Run.Event, "run_id", run_aggregate_id),
    (FollowUp.Event, "follow_up_id", follow_up_aggregate_id),
    (WorkflowMessage.Event, "workflow_message_id", message_aggregate_id),
    (TurnReservation.Event, "workflow_turn_id", turn_aggregate_id),
)


def events_of(aggregate: A, *commands: Callable[[A], object]) -> list[Event]:
    """Run ``commands`` on ``aggregate`` and return every event it has pending (a history)."""
    for command in commands:
        command(aggregate)
    return list(aggregate.collect_events())


def history_of(*steps: Callable[[AggregateSet], object]) -> list[Event]:
    """Run ``steps`` on an empty set of aggregates and return their events in save order."""
    aggregates = AggregateSet()
    for step in steps:
        step(aggregates)
    return aggregates.collect_events()


def given(aggregate_class: type[A], history: Sequence[Event]) -> Given[A]:
    """Start a specification from recorded events (empty for a creation command)."""
    return Given(aggregate_class, history)


def given_events(history: Sequence[GivenEvent]) -> GivenAggregates:
    """Start a specification over every aggregate the events of ``history`` belong to."""
    return GivenAggregates(history)


def _rebuilt(history: Sequence[Event]) -> dict[UUID, Any]:
    aggregates: dict[UUID, Any] = {}
    for event in history:
        aggregates[event.originator_id] = event.mutate(aggregates.get(event.originator_id))
    return aggregates


class Given(Generic[A]):
    """An aggregate rebuilt from its history, before the command under test."""

    def __init__(self, aggregate_class: type[A], history: Sequence[Event]) -> None:
        self.aggregate_class = aggregate_class
        self.aggregate: A | None = None
        rebuilt = list(_rebuilt(history).values())
        if rebuilt:
            (aggregate,) = rebuilt
            if not isinstance(aggregate, aggregate_class):
                raise TypeError(f"history built a {type(aggregate).__name__}")
            self.aggregate = aggregate

    def when(self, command: Callable[[A], object]) -> Then[A]:
        """Run a command on the rebuilt aggregate."""
        if self.aggregate is None:
            raise TypeError("when() needs a history; use when_creating() for a new aggregate")
        aggregate = self.aggregate
        return Then.of(aggregate, lambda: command(aggregate), lambda: [aggregate])

    def when_creating(self, factory: Callable[[], A]) -> Then[A]:
        """Run a creation command (a class method returning the new aggregate)."""
        if self.aggregate is not None:
            raise TypeError("when_creating() needs an empty history")
        try:
            created = factory()
        except Exception as error:  # kept and re-raised by then(), checked by then_raises()
            return Then(None, None, error, [])
        if not isinstance(created, self.aggregate_class):
            raise TypeError(f"factory returned a {type(created).__name__}")
        return Then(created, created, None, [created])


class GivenAggregates:
    """Several aggregates rebuilt from their events, before the domain function under test."""

    def __init__(self, history: Sequence[GivenEvent]) -> None:
        versions: dict[UUID, int] = {}
        events = [_decoded(event, versions) for event in history]
        self.stored = list(_rebuilt(events).values())

    def when(self, command: Callable[[AggregateSet], object]) -> Then[AggregateSet]:
        """Run a domain function on the rebuilt aggregates, as if they were stored."""
        aggregates = AggregateSet(self.stored)
        return Then.of(aggregates, lambda: command(aggregates), lambda: list(aggregates))


def _decoded(event: GivenEvent, versions: dict[UUID, int]) -> Event:
    """An event object as given, or a ``(wire_name, payload)`` pair decoded as if stored."""
    if not isinstance(event, tuple):
        versions[event.originator_id] = event.originator_version
        return event
    name, payload = event
    field, to_uuid = next(
        (field, to_uuid)
        for base, field, to_uuid in _IDENTITIES
        if issubclass(EVENT_CLASSES[name], base)
    )
    originator_id = to_uuid(payload[field])
    versions[originator_id] = versions.get(originator_id, 0) + 1
    state = {"timestamp": GIVEN_AT.isoformat(), "actor": {"type": "host", "id": None}, **payload}
    stored = StoredEvent(
        originator_id=originator_id,
        originator_version=versions[originator_id],
        topic=name,
        state=orjson.dumps(state),
    )
    decoded = LedgerMapper().to_domain_event(stored)
    if not isinstance(decoded, CanMutateAggregate):
        raise TypeError(f"{name} is not an aggregate event")
    return decoded


class Then(Generic[S]):
    """The outcome of one command: its result or error, and the events it added."""

    def __init__(
        self,
        subject: S | None,
        result: object,
        error: Exception | None,
        watched: Sequence[BaseAggregate[UUID]],
        versions: Mapping[UUID, int] | None = None,
    ) -> None:
        self.subject = subject
        self.result = result
        self.error = error
        self.watched = list(watched)
        self.versions_before = dict(versions or {})

    @classmethod
    def of(
        cls,
        subject: S,
        command: Callable[[], object],
        watched: Callable[[], Sequence[BaseAggregate[UUID]]],
    ) -> Then[S]:
        """Run ``command`` and keep its outcome; ``watched()`` are the aggregates to check."""
        versions = {aggregate.id: aggregate.version for aggregate in watched()}
        try:
            result = command()
        except Exception as error:  # kept and re-raised by then(), checked by then_raises()
            return cls(subject, None, error, watched(), versions)
        return cls(subject, result, None, watched(), versions)

    @property
    def aggregate(self) -> S | None:
        """The aggregate (or set of aggregates) the command ran on."""
        return self.subject

    @property
    def events(self) -> list[Event]:
        """Every event the command added, aggregate by aggregate in save order."""
        return [event for aggregate in self.watched for event in aggregate.pending_events]

    def then(self, expected: Expected) -> S:
        """Check the added events' wire names, in order, and a subset of each payload."""
        if self.error is not None:
            raise self.error
        assert self.subject is not None
        events = self.events
        assert [wire_name(event) for event in events] == [name for name, _ in expected]
        for event, (_, payload) in zip(events, expected, strict=True):
            fields = vars(event)
            actual = {key: fields.get(key, _MISSING) for key in payload}
            assert actual == dict(payload), f"payload of {wire_name(event)}"
        return self.subject

    def then_raises(self, error_class: type[Exception], message: str) -> None:
        """Check the exact error class and message, and that no event was added."""
        assert self.error is not None, f"expected {error_class.__name__}, nothing was raised"
        assert type(self.error) is error_class, repr(self.error)
        assert str(self.error) == message
        assert self.events == []
        for aggregate in self.watched:
            assert aggregate.version == self.versions_before.get(aggregate.id, aggregate.version)


def wire_name(event: object) -> str:
    """The event's permanent wire name (its class TOPIC)."""
    return str(getattr(type(event), "TOPIC", type(event).__qualname__))
