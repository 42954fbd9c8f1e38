"""Copying one store's event log into another, byte for byte: how the schema-upgrade tests
carry an old store's events into a new one.

Each stored event keeps its bytes (an event stored at an older ``class_version`` stays at it,
to be upcast when read, as in the source). Only its index columns (``run_id`` and the lookup
key) are not in a log read, so they are derived from the event itself, decoded through the
catalogue as every read does: an event that does not decode stops the copy with its
``CorruptEventError``. The target should be empty; it numbers the events in the same order.
Snapshots are a cache and are not copied.
"""

from __future__ import annotations

from typing import Final

from runledger.domain.events import LedgerEvent
from runledger.infrastructure.commits.mapper import LedgerMapper, LedgerStoredEvent
from runledger.infrastructure.commits.ports import EventStorage

BATCH: Final = 1000


def copy_events(source: EventStorage, target: EventStorage, *, batch: int = BATCH) -> int:
    """Append every event of ``source``'s log to ``target``'s, in order; returns how many."""
    mapper = LedgerMapper()
    copied = after = 0
    while notifications := source.select_log(after=after, limit=batch):
        rows = []
        for notification in notifications:
            event = mapper.to_domain_event(notification)
            run_id = lookup_key = None
            if isinstance(event, LedgerEvent):
                run_id, lookup_key = event.run_id, event.lookup_key()
            rows.append(
                LedgerStoredEvent(
                    originator_id=notification.originator_id,
                    originator_version=notification.originator_version,
                    topic=notification.topic,
                    state=notification.state,
                    run_id=run_id,
                    lookup_key=lookup_key,
                )
            )
        target.events.insert_events(rows)
        copied += len(rows)
        after = notifications[-1].id
    return copied
