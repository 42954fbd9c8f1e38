"""What the three event storages share: table names and how a stored event's columns are derived."""

from __future__ import annotations

from uuid import UUID

from eventsourcing.persistence import DataError, StoredEvent

from domain.serialisation import LedgerStoredEvent

EVENTS_TABLE = "runledger_events"
SNAPSHOTS_TABLE = "runledger_snapshots"


def as_uuid(originator_id: UUID | str) -> UUID:
    """The originator id as a UUID; every backend stores and returns UUIDs only."""
    if isinstance(originator_id, UUID):
        return originator_id
    try:
        return UUID(originator_id)
    except (TypeError, ValueError) as error:
        msg = f"Originator id is not a UUID: {originator_id!r}"
        raise DataError(msg) from error


def index_columns(stored_event: StoredEvent) -> tuple[str | None, str | None]:
    """The ``(run_id, lookup_key)`` a stored event is indexed by (NULLs for a plain one)."""
    if isinstance(stored_event, LedgerStoredEvent):
        return stored_event.run_id, stored_event.lookup_key
    return None, None
