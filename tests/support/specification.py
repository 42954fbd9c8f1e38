"""Given/when/then specifications for aggregates, in the style of Emmett's DeciderSpecification.

``given(Run, history)`` rebuilds an aggregate by applying recorded events, ``.when(command)``
runs one command on it, and ``.then([(wire_name, payload_subset), ...])`` checks the events
the command added, or ``.then_raises(ErrorClass, "exact message")`` checks the error and that
nothing was added. No database is involved.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, Generic, TypeVar
from uuid import UUID

from eventsourcing.domain import BaseAggregate, CanMutateAggregate

A = TypeVar("A", bound=BaseAggregate[UUID])
Event = CanMutateAggregate[UUID]
Expected = Sequence[tuple[str, Mapping[str, Any]]]

_MISSING = "<missing>"


def events_of(aggregate: A, *commands: Callable[[A], object]) -> list[Event]:
    """Run ``commands`` on ``aggregate`` and return every event it has pending (a history)."""
    for command in commands:
        command(aggregate)
    return list(aggregate.collect_events())


def given(aggregate_class: type[A], history: Sequence[Event]) -> Given[A]:
    """Start a specification from recorded events (empty for a creation command)."""
    return Given(aggregate_class, history)


class Given(Generic[A]):
    """An aggregate rebuilt from its history, before the command under test."""

    def __init__(self, aggregate_class: type[A], history: Sequence[Event]) -> None:
        self.aggregate_class = aggregate_class
        self.aggregate: A | None = None
        aggregate: Any = None
        for event in history:
            aggregate = event.mutate(aggregate)
        if aggregate is not None:
            if not isinstance(aggregate, aggregate_class):
                raise TypeError(f"history built a {type(aggregate).__name__}")
            self.aggregate = aggregate

    def when(self, command: Callable[[A], object]) -> Then[A]:
        """Run a command on the rebuilt aggregate."""
        if self.aggregate is None:
            raise TypeError("when() needs a history; use when_creating() for a new aggregate")
        aggregate = self.aggregate
        version = aggregate.version
        try:
            result = command(aggregate)
        except Exception as error:  # kept and re-raised by then(), checked by then_raises()
            return Then(aggregate, None, error, version)
        return Then(aggregate, result, None, version)

    def when_creating(self, factory: Callable[[], A]) -> Then[A]:
        """Run a creation command (a class method returning the new aggregate)."""
        if self.aggregate is not None:
            raise TypeError("when_creating() needs an empty history")
        try:
            created = factory()
        except Exception as error:  # kept and re-raised by then(), checked by then_raises()
            return Then(None, None, error, 0)
        if not isinstance(created, self.aggregate_class):
            raise TypeError(f"factory returned a {type(created).__name__}")
        return Then(created, created, None, 0)


class Then(Generic[A]):
    """The outcome of one command: its result or error, and the events it added."""

    def __init__(
        self, aggregate: A | None, result: object, error: Exception | None, version: int
    ) -> None:
        self.aggregate = aggregate
        self.result = result
        self.error = error
        self.version_before = version

    @property
    def events(self) -> list[Event]:
        return [] if self.aggregate is None else list(self.aggregate.pending_events)

    def then(self, expected: Expected) -> A:
        """Check the added events' wire names, in order, and a subset of each payload."""
        if self.error is not None:
            raise self.error
        assert self.aggregate is not None
        events = self.events
        assert [wire_name(event) for event in events] == [name for name, _ in expected]
        for event, (_, payload) in zip(events, expected, strict=True):
            fields = vars(event)
            actual = {key: fields.get(key, _MISSING) for key in payload}
            assert actual == dict(payload), f"payload of {wire_name(event)}"
        return self.aggregate

    def then_raises(self, error_class: type[Exception], message: str) -> None:
        """Check the exact error class and message, and that no event was added."""
        assert self.error is not None, f"expected {error_class.__name__}, nothing was raised"
        assert type(self.error) is error_class, repr(self.error)
        assert str(self.error) == message
        assert self.events == []
        if self.aggregate is not None:
            assert self.aggregate.version == self.version_before


def wire_name(event: object) -> str:
    """The event's permanent wire name (its class TOPIC)."""
    return str(getattr(type(event), "TOPIC", type(event).__qualname__))
