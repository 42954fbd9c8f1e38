"""Decoding stored events for projections, without building domain objects (it is hot)."""

from __future__ import annotations

import orjson
from eventsourcing.persistence import Notification

from domain.ports import LogEntry
from projections.base import ProjectedEvent


def projected(entry: LogEntry | Notification) -> ProjectedEvent:
    """The projection view of a stored event read with ``read_log`` or ``select_log``."""
    position = entry.position if isinstance(entry, LogEntry) else entry.id
    return ProjectedEvent(
        position=position,
        wire_name=entry.topic,
        aggregate_id=entry.originator_id,
        version=entry.originator_version,
        data=orjson.loads(entry.state),
    )
