"""The library's mapper over runledger's wire format (``domain.serialisation``): events become
``LedgerStoredEvent`` rows carrying the columns the store indexes, and back."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.domain import DomainEventProtocol
from eventsourcing.persistence import Mapper, Notification, StoredEvent, Transcoder

from runledger.domain.serialisation import decoded, encoded


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
        return LedgerStoredEvent(*encoded(domain_event))

    def to_domain_event(self, stored_event: StoredEvent) -> DomainEventProtocol[UUID]:
        position = stored_event.id if isinstance(stored_event, Notification) else None
        return decoded(stored_event, position)
