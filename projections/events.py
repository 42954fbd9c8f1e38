"""Decoding stored events for projections, without building domain objects (it is hot)."""

from __future__ import annotations

import orjson
from eventsourcing.persistence import Notification

from runledger.domain.catalogue import EVENT_CLASSES
from runledger.domain.events import upcast
from runledger.domain.ports import LogEntry
from runledger.projections.base import ProjectedEvent


def projected(entry: LogEntry | Notification) -> ProjectedEvent:
    """The projection view of a stored event read with ``read_log`` or ``select_log``.

    Stored data of an older ``class_version`` goes through the event class's upcasters, as
    the domain's mapper does, so projections only ever see an event's current shape.
    """
    position = entry.position if isinstance(entry, LogEntry) else entry.id
    data = orjson.loads(entry.state)
    upcast(EVENT_CLASSES.get(entry.topic), data)
    return ProjectedEvent(
        position=position,
        wire_name=entry.topic,
        aggregate_id=entry.originator_id,
        version=entry.originator_version,
        data=data,
    )
