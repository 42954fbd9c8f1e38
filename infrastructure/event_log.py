"""The stored events as ``event_log`` answers them: decoded, checked, in log order."""

from __future__ import annotations

from typing import Final
from uuid import UUID

from eventsourcing.persistence import Mapper, Notification

from runledger.domain.application import page_bound
from runledger.domain.records import LoggedEvent
from runledger.domain.runs import check_run_id
from runledger.domain.values import SYSTEM, Actor
from runledger.infrastructure.commits.ports import EventStorage

_EVENT_ENVELOPE: Final = frozenset(
    {"originator_id", "originator_version", "timestamp", "originator_topic", "actor"}
)


class EventLog:
    """One store's log, read page by page."""

    def __init__(self, storage: EventStorage, mapper: Mapper[UUID]) -> None:
        self._storage = storage
        self._mapper = mapper

    def event_log(
        self, *, after: int = 0, limit: int = 1000, run_id: str | None = None
    ) -> list[LoggedEvent]:
        """Stored events in log order; with ``run_id`` only that run's and its children's."""
        page_bound("log position", after)
        page_bound("log limit", limit)
        if run_id is not None:
            check_run_id(run_id)
        notifications = self._storage.select_log(after=after, limit=limit, run_id=run_id)
        return [self.logged_event(notification) for notification in notifications]

    def logged_event(self, notification: Notification) -> LoggedEvent:
        """One stored event as ``event_log`` returns it."""
        event = self._mapper.to_domain_event(notification)
        state = vars(event)
        actor = state["actor"]  # checked by the mapper: {type, id}
        return LoggedEvent(
            position=notification.id,
            wire_name=notification.topic,
            aggregate_id=str(notification.originator_id),
            version=notification.originator_version,
            recorded_at=state["timestamp"],
            actor=SYSTEM if not actor else Actor.from_json(actor),
            payload={key: value for key, value in state.items() if key not in _EVENT_ENVELOPE},
        )
