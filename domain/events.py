"""Base classes for every runledger event and snapshot.

Each event carries the acting ``actor`` ({type, id}) and the natural id of the run it belongs
to (``run_id``, so the log can be read per run); its ``timestamp`` comes from the
application's injected clock and is exposed as ``recorded_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar, cast
from uuid import UUID

from eventsourcing.domain import (
    AggregateCreated,
    AggregateEvent,
    BaseAggregate,
    CanSnapshotAggregate,
    DomainEvent,
)

from runledger.domain.errors import CorruptEventError


class LedgerEvent(AggregateEvent):
    """A recorded fact; its class ``TOPIC`` is its permanent wire name."""

    TOPIC: ClassVar[str]
    actor: dict[str, Any]
    run_id: str

    @property
    def recorded_at(self) -> datetime:
        return self.timestamp

    @property
    def wire_name(self) -> str:
        return type(self).TOPIC

    def lookup_key(self) -> str | None:
        """A natural key the store indexes this event under (None: not indexed)."""
        return None

    def mutate(self, aggregate: Any) -> Any:
        # A history whose rows decode one by one can still be impossible as a sequence: an
        # event of another aggregate type, or a version that does not follow. Checked here,
        # where the library would raise its own errors or apply it to the wrong class.
        owner = EVENT_OWNERS.get(type(self))
        if aggregate is None:
            if not isinstance(self, LedgerCreated):
                raise corrupt(self, "its aggregate has no first event before it")
        elif owner is None or type(aggregate) is not owner:
            raise corrupt(self, f"it does not belong to a {type(aggregate).__name__}")
        elif self.originator_version != aggregate.version + 1:
            raise corrupt(self, f"it does not follow version {aggregate.version}")
        return super().mutate(aggregate)


def corrupt(event: DomainEvent, reason: str) -> CorruptEventError:
    """The error for a decoded ``event`` that cannot be part of its aggregate's history."""
    return CorruptEventError(
        reason,
        wire_name=getattr(type(event), "TOPIC", type(event).__qualname__),
        aggregate_id=event.originator_id,
        version=event.originator_version,
    )


class LedgerCreated(AggregateCreated):
    """Base of each aggregate's first event: builds the aggregate that declares its class."""

    def mutate(self, _: Any) -> Any:
        # Unlike the library's, never resolves ``originator_topic``: a stored payload must not
        # choose a class (the mapper has checked the field against the catalogue already).
        owner = EVENT_OWNERS.get(type(self))
        if owner is None:
            raise corrupt(self, "its class belongs to no aggregate of the catalogue")
        created = owner.__new__(owner)
        created.__base_init__(self.originator_id, self.originator_version, self.timestamp)
        # Aggregates' __init__ takes nothing and does nothing: state comes from apply().
        self.apply(created)
        return created


def upcast(cls: type[Any] | None, state: dict[str, Any]) -> None:
    """Bring ``state``, stored at its ``class_version`` (1 when absent), up to ``cls``'s
    version in place, through ``cls.upcast_vN_vN+1``; the version key is removed."""
    version = state.pop("class_version", 1)
    current = getattr(cls, "class_version", 1)
    while version < current:
        getattr(cls, f"upcast_v{version}_v{version + 1}")(state)
        version += 1


class LedgerSnapshot(CanSnapshotAggregate[UUID], DomainEvent):
    """Aggregate state at a version; resolves its aggregate class only from the catalogue."""

    TOPIC: ClassVar[str]
    topic: str
    state: dict[str, Any]

    def mutate(self, _: None) -> BaseAggregate[UUID]:
        aggregate_class = EVENT_OWNERS.get(type(self))
        if aggregate_class is None:
            raise corrupt(self, "its class belongs to no aggregate of the catalogue")
        state = dict(self.state)
        upcast(aggregate_class, state)
        state["_id"] = self.originator_id
        state["_version"] = self.originator_version
        state["_pending_events"] = []
        aggregate = object.__new__(aggregate_class)
        object.__setattr__(aggregate, "__dict__", state)
        return aggregate


class CopiedCheaply:
    """Aggregates are copied out of the repository's cache on every load: copy only what
    events mutate in place (``MUTABLE_FIELDS``); JSON values are shared, never mutated."""

    MUTABLE_FIELDS: ClassVar[dict[str, Callable[[Any], Any]]] = {}

    def __deepcopy__(self, memo: dict[int, Any]) -> Any:
        clone = object.__new__(type(self))
        state = dict(self.__dict__)
        state["_pending_events"] = list(state.get("_pending_events", ()))
        for name, copier in self.MUTABLE_FIELDS.items():
            if name in state:
                state[name] = copier(state[name])
        object.__setattr__(clone, "__dict__", state)
        return clone


EVENT_OWNERS: dict[type[Any], type[BaseAggregate[UUID]]] = {}
"""Event or snapshot class -> the aggregate class that declares it; see ``OwnsNestedEvents``."""


class OwnsNestedEvents:
    """Mixed into each aggregate: the event and snapshot classes declared in its body are its
    own, so decoding and replay find an event's aggregate from code, never from stored data."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for value in vars(cls).values():
            if isinstance(value, type) and issubclass(value, (LedgerEvent, LedgerSnapshot)):
                EVENT_OWNERS[value] = cast("type[BaseAggregate[UUID]]", cls)
