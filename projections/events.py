"""Decoding stored events for projections, without building domain objects (it is hot)."""

from __future__ import annotations

from eventsourcing.persistence import Notification

from runledger.domain.ports import LogEntry
from runledger.domain.serialisation import decoded_state
from runledger.projections.base import ProjectedEvent


def projected(entry: LogEntry | Notification) -> ProjectedEvent:
    """The projection view of a stored event read with ``read_log`` or ``select_log``.

    It is decoded and checked as the domain's mapper does (``CorruptEventError`` for an event
    that does not decode), and stored data of an older ``class_version`` goes through the
    event class's upcasters, so projections only ever see an event's current, valid shape.
    """
    position = entry.position if isinstance(entry, LogEntry) else entry.id
    _, data = decoded_state(entry, position)
    return ProjectedEvent(
        position=position,
        wire_name=entry.topic,
        aggregate_id=entry.originator_id,
        version=entry.originator_version,
        data=data,
    )
