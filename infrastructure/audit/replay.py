"""Replaying every aggregate of a selection from its stored events, as a command loads it.

Each aggregate's whole history is read and decoded by the application's mapper (the class
from the wire name through the catalogue, every field checked, upcasters applied) and folded
with the events' own ``mutate``, which checks that each version follows the last: a stored
event that does not fit raises ``CorruptEventError`` naming it. No snapshot or cache is used.
"""

from __future__ import annotations

from collections.abc import Iterable
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.application import WorkflowRuns
from runledger.domain.errors import CorruptEventError
from runledger.domain.events import LedgerEvent


def replay_aggregates(app: WorkflowRuns, versions: Iterable[tuple[UUID, int]]) -> int:
    """Replay each aggregate; ``versions`` pairs an id with the highest version the audit saw
    of it, which its history must reach. Returns how many aggregates were replayed."""
    count = 0
    for aggregate_id, seen in versions:
        aggregate: BaseAggregate[UUID] | None = None
        for event in app.events.get(aggregate_id):
            if not isinstance(event, LedgerEvent):
                raise CorruptEventError(
                    "a snapshot is stored among its events",
                    wire_name=getattr(type(event), "TOPIC", None),
                    aggregate_id=aggregate_id,
                    version=event.originator_version,
                )
            aggregate = event.mutate(aggregate)
        version = 0 if aggregate is None else aggregate.version
        if version < seen:
            raise CorruptEventError(
                f"its history ends at version {version}, but the log holds version {seen}",
                wire_name=None,
                aggregate_id=aggregate_id,
                version=seen,
            )
        count += 1
    return count
