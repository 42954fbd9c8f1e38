"""Replaying every aggregate of a selection from its stored events, as a command loads it.

Each event is decoded by the application's mapper (the class from the wire name through the
catalogue, every field checked, upcasters applied) and folded into its aggregate with the
events' own ``mutate``, which checks that each version follows the last: a stored event that
does not fit raises ``CorruptEventError`` naming it. No snapshot or cache is used.

The events come from the audit's selection, not from one query per aggregate: every event of
an aggregate names a run of one tree (a settings scope only moves within its tree), so the
selection of a whole tree holds whole histories, and an event missing from one (its run
changed in storage) shows as the next version not following.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from eventsourcing.domain import BaseAggregate
from eventsourcing.persistence import Notification

from runledger.domain.application import WorkflowRuns
from runledger.domain.errors import CorruptEventError
from runledger.domain.events import LedgerEvent


def replay_aggregates(app: WorkflowRuns, notifications: Iterable[Notification]) -> int:
    """Fold the selected events (in log order) into their aggregates; returns how many."""
    aggregates: dict[UUID, BaseAggregate[UUID] | None] = {}
    for notification in notifications:
        event = app.mapper.to_domain_event(notification)
        if not isinstance(event, LedgerEvent):
            raise CorruptEventError(
                "a snapshot is stored among its events",
                wire_name=notification.topic,
                aggregate_id=notification.originator_id,
                version=notification.originator_version,
                position=notification.id,
            )
        aggregates[event.originator_id] = event.mutate(aggregates.get(event.originator_id))
    return len(aggregates)
