"""Base classes for every runledger event and snapshot.

Each event carries the acting ``actor`` ({type, id}) and the natural id of the run it belongs
to (``run_id``, so the log can be read per run); its ``timestamp`` comes from the
application's injected clock and is exposed as ``recorded_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import (
    AggregateCreated,
    AggregateEvent,
    BaseAggregate,
    CanSnapshotAggregate,
    DomainEvent,
)

from runledger.domain.errors import UnknownStoredEventError


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


class LedgerCreated(AggregateCreated):
    """Marker base of each aggregate's first event."""


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
        aggregate_class = AGGREGATE_CLASSES.get(self.topic)
        if aggregate_class is None:
            raise UnknownStoredEventError(self.topic)
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


AGGREGATE_CLASSES: dict[str, type[BaseAggregate[UUID]]] = {}
"""Aggregate TOPIC -> class; filled by ``domain.catalogue``."""
