"""How far each read model is behind the log: in events, in seconds, and whether it stalled.

Read from the view store's tracking rows (what every process sees), not from this process's
runners: a server whose read models a separate worker keeps reports that worker's lag.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from runledger.domain.serialisation import stored_payload
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.views.store import ViewStore


@dataclass(frozen=True)
class ProjectionLag:
    """One read model's distance from the log's head."""

    name: str
    events: int
    """Events in the log after the model's position."""
    seconds: float
    """Age of the oldest event the model has not applied (0 when it has them all)."""
    stalled: bool
    """A recorded failure stops the model until it is rebuilt."""


def projection_lags(
    storage: EventStorage, views: ViewStore, names: Sequence[str], now: datetime
) -> list[ProjectionLag]:
    """The lag of each named read model at ``now`` (the store's clock)."""
    head = storage.max_position()
    states = {state.name: state for state in views.tracking()}
    ages: dict[int, float] = {}
    lags = []
    for name in names:
        state = states.get(name)
        position = 0 if state is None else state.position
        events = max(0, head - position)
        if events and position not in ages:
            ages[position] = _age(storage, position, now)
        lags.append(
            ProjectionLag(
                name=name,
                events=events,
                seconds=ages[position] if events else 0.0,
                stalled=state is not None and state.last_error is not None,
            )
        )
    return lags


def _age(storage: EventStorage, position: int, now: datetime) -> float:
    """Seconds since the first event after ``position`` was recorded (its own timestamp)."""
    entries = storage.read_log(after=position, limit=1)
    if not entries:
        # PostgreSQL: the next position belongs to a transaction still open; not late yet.
        return 0.0
    recorded = datetime.fromisoformat(stored_payload(entries[0], position)["timestamp"])
    return max(0.0, (now - recorded).total_seconds())


__all__: Sequence[str] = ["ProjectionLag", "projection_lags"]
