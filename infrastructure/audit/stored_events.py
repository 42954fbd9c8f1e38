"""The stored events of a set of runs in log order, read with ``event_log``'s selection.

``EventStorage.select_log(run_id=...)`` is the selection ``event_log(run_id=...)`` makes: the
run's events and those of its follow-ups, messages, turns, settings scopes, decisions, session
segments and effects. Several runs' selections are merged by position.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Iterator, Sequence
from uuid import UUID

from eventsourcing.persistence import Notification

from runledger.domain.ports import LogEntry
from runledger.domain.records import LoggedEvent
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.event_log import EventLog

PAGE = 1000


def run_notifications(
    storage: EventStorage, run_ids: Sequence[str], *, up_to: int | None = None
) -> Iterator[Notification]:
    """Every stored event of the runs, in log order (up to position ``up_to``)."""
    merged = heapq.merge(
        *(_one_run(storage, run_id) for run_id in run_ids), key=lambda item: item.id
    )
    for notification in merged:
        if up_to is not None and notification.id > up_to:
            return
        yield notification


def logged_events(
    storage: EventStorage, log: EventLog, run_ids: Sequence[str], *, up_to: int | None = None
) -> Iterator[LoggedEvent]:
    """``run_notifications`` decoded as ``event_log`` returns them (upcast, checked)."""
    for notification in run_notifications(storage, run_ids, up_to=up_to):
        yield log.logged_event(notification)


def log_entry(notification: Notification) -> LogEntry:
    """A selected event as projections read it."""
    return LogEntry(
        position=notification.id,
        topic=notification.topic,
        originator_id=notification.originator_id,
        originator_version=notification.originator_version,
        state=notification.state,
    )


def aggregate_text(originator_id: UUID | str) -> str:
    """An aggregate id in its canonical text form (SQLite stores it as hex text)."""
    if isinstance(originator_id, UUID):
        return str(originator_id)
    try:
        return str(UUID(originator_id))
    except (TypeError, ValueError, AttributeError):
        # A corrupt id is kept as stored: decoding the event reports it.
        return str(originator_id)


def _one_run(storage: EventStorage, run_id: str) -> Iterable[Notification]:
    after = 0
    while True:
        page = storage.select_log(after=after, limit=PAGE, run_id=run_id)
        yield from page
        if len(page) < PAGE:
            return
        after = page[-1].id
