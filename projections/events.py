"""Decoding stored events for projections, without building domain objects (it is hot)."""

from __future__ import annotations

from uuid import UUID

import orjson
from eventsourcing.persistence import Notification

from projections.base import ProjectedEvent


def projected(notification: Notification) -> ProjectedEvent:
    originator_id = notification.originator_id
    return ProjectedEvent(
        position=notification.id,
        wire_name=notification.topic,
        aggregate_id=originator_id if isinstance(originator_id, UUID) else UUID(originator_id),
        version=notification.originator_version,
        data=orjson.loads(notification.state),
    )
