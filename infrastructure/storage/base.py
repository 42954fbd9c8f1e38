"""What the three event storages share: table names and how a stored event's columns are derived."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol
from uuid import UUID

from eventsourcing.persistence import DataError, Notification, StoredEvent

from runledger.domain.serialisation import LedgerStoredEvent

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


class IndexedEventRecorder(Protocol):
    """What each backend's event recorder answers beyond the library's interface."""

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]: ...

    def select_log(self, *, after: int, limit: int, run_id: str | None) -> Sequence[Any]: ...

    def max_notification_id(self) -> Any: ...


class RecorderBackedStorage:
    """The ``EventStorage`` queries every backend answers from its event recorder."""

    _events: IndexedEventRecorder

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Aggregates with an event indexed under ``lookup_key``, in log order."""
        return self._events.originator_ids_by_key(lookup_key)

    def select_log(
        self, *, after: int, limit: int, run_id: str | None = None
    ) -> Sequence[Notification]:
        """Stored events after ``after`` in log order; with ``run_id``, that run's only."""
        notifications: Sequence[Notification] = self._events.select_log(
            after=after, limit=limit, run_id=run_id
        )
        return notifications

    def max_position(self) -> int:
        """The highest position in the log (0 when empty)."""
        position: int | None = self._events.max_notification_id()
        return position or 0
