"""How events and snapshots become stored bytes, and back.

The wire format is plain JSON (no type tags): ``timestamp`` and the aggregate's declared
datetime fields are ISO-8601 strings, ids are strings. Topics resolve only through the event
catalogue, so a stored topic can never import an arbitrary module.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, StoredEvent, Transcoder

from runledger.domain.catalogue import EVENT_CLASSES
from runledger.domain.errors import UnknownStoredEventError
from runledger.domain.events import AGGREGATE_CLASSES, LedgerEvent, LedgerSnapshot, upcast


@dataclass(frozen=True)
class LedgerStoredEvent(StoredEvent):
    """A stored event plus the columns the store indexes it by."""

    run_id: str | None = None
    lookup_key: str | None = None


class _UnusedTranscoder(Transcoder):
    """The library's Mapper wants a transcoder; ours encodes with orjson directly."""

    def encode(self, obj: Any) -> bytes:
        return orjson.dumps(obj)

    def decode(self, data: bytes) -> Any:
        return orjson.loads(data)


class LedgerMapper(Mapper[UUID]):
    """Maps catalogue events to plain JSON and back, refusing unknown topics."""

    def __init__(self) -> None:
        super().__init__(transcoder=_UnusedTranscoder())

    def to_stored_event(self, domain_event: DomainEventProtocol[UUID]) -> StoredEvent:
        event_class = type(domain_event)
        topic = getattr(event_class, "TOPIC", None)
        if topic is None or EVENT_CLASSES.get(topic) is not event_class:
            raise UnknownStoredEventError(topic or event_class.__qualname__)
        state = dict(vars(domain_event))
        originator_id = state.pop("originator_id")
        originator_version = state.pop("originator_version")
        class_version = getattr(event_class, "class_version", 1)
        if class_version > 1:
            state["class_version"] = class_version
        if isinstance(domain_event, LedgerEvent):
            run_id: str | None = domain_event.run_id
            lookup_key = domain_event.lookup_key()
        else:
            run_id = lookup_key = None
            state["state"] = _without_pending(state["state"])
        return LedgerStoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=topic,
            state=orjson.dumps(state),
            run_id=run_id,
            lookup_key=lookup_key,
        )

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        event_class = EVENT_CLASSES.get(stored_event.topic)
        if event_class is None:
            raise UnknownStoredEventError(stored_event.topic)
        state: dict[str, Any] = orjson.loads(stored_event.state)
        state["timestamp"] = datetime.fromisoformat(state["timestamp"])
        if issubclass(event_class, LedgerSnapshot):
            state["state"] = _restore_aggregate_state(state["topic"], state["state"])
        originator_id = stored_event.originator_id
        state["originator_id"] = (
            originator_id if isinstance(originator_id, UUID) else UUID(originator_id)
        )
        state["originator_version"] = stored_event.originator_version
        upcast(event_class, state)
        domain_event = object.__new__(event_class)
        object.__setattr__(domain_event, "__dict__", state)
        return domain_event


def _without_pending(aggregate_state: dict[str, Any]) -> dict[str, Any]:
    return {
        key: value
        for key, value in aggregate_state.items()
        if key not in ("_id", "_version", "_pending_events")
    }


def _restore_aggregate_state(topic: str, aggregate_state: dict[str, Any]) -> dict[str, Any]:
    aggregate_class = AGGREGATE_CLASSES.get(topic)
    if aggregate_class is None:
        raise UnknownStoredEventError(topic)
    restored = dict(aggregate_state)
    datetime_fields = (
        "_created_on",
        "_modified_on",
        *getattr(aggregate_class, "DATETIME_FIELDS", ()),
    )
    for name in datetime_fields:
        value = restored.get(name)
        if isinstance(value, str):
            restored[name] = datetime.fromisoformat(value)
    return restored
