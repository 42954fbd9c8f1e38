"""Assertions the scenario tests share: exact rejections that write nothing, and new events."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import pytest

from runledger.domain.errors import WorkflowError
from runledger.domain.records import LoggedEvent
from runledger.infrastructure.store import WorkflowStore

PAGE = 1000


def whole_log(store: WorkflowStore) -> list[LoggedEvent]:
    """Every stored event, in log order (paged, so no log is too long to compare)."""
    events: list[LoggedEvent] = []
    after = 0
    while True:
        page = store.event_log(after=after, limit=PAGE)
        if not page:
            return events
        events.extend(page)
        after = page[-1].position


def log_position(store: WorkflowStore) -> int:
    """The position of the newest stored event (0 for an empty log)."""
    log = whole_log(store)
    return log[-1].position if log else 0


@contextmanager
def writes_nothing(store: WorkflowStore) -> Iterator[None]:
    """The block leaves the whole event log exactly as it found it."""
    before = whole_log(store)
    yield
    after = whole_log(store)
    assert [e.wire_name for e in after[len(before) :]] == []
    assert after == before


def assert_rejected(
    store: WorkflowStore,
    error_class: type[WorkflowError],
    message: str,
    command: Callable[..., object],
    /,
    *args: Any,
    **kwargs: Any,
) -> WorkflowError:
    """``command`` fails with exactly ``error_class`` and ``message`` and writes nothing."""
    with writes_nothing(store), pytest.raises(WorkflowError) as caught:
        command(*args, **kwargs)
    assert type(caught.value) is error_class
    assert str(caught.value) == message
    return caught.value


def bare_errors(
    store: WorkflowStore, calls: Iterable[tuple[str, Callable[[Any], object]]]
) -> list[str]:
    """Each named call that failed with anything but a WorkflowError (a bare TypeError...)."""
    bare: list[str] = []
    for name, call in calls:
        try:
            call(store)
        except WorkflowError:
            pass
        except Exception as error:
            bare.append(f"{name}: {type(error).__name__}: {error}")
    return bare


@dataclass
class Recorded:
    """The events a block appended to the log (filled in when the block ends)."""

    events: list[LoggedEvent] = field(default_factory=list)

    @property
    def wire_names(self) -> list[str]:
        return [event.wire_name for event in self.events]

    def named(self, wire_name: str) -> list[LoggedEvent]:
        return [event for event in self.events if event.wire_name == wire_name]


@contextmanager
def recording(store: WorkflowStore) -> Iterator[Recorded]:
    """Collect the events appended while the block runs."""
    recorded = Recorded()
    start = log_position(store)
    yield recorded
    recorded.events = [event for event in whole_log(store) if event.position > start]


def payload_fields(event: LoggedEvent, expected: dict[str, Any]) -> dict[str, Any]:
    """The event's payload restricted to the keys of ``expected`` (absent keys show so).

    Payloads may grow new facts for new read models; a scenario pins the facts it is about:
    ``assert payload_fields(event, expected) == expected``.
    """
    return {key: event.payload.get(key, "<absent>") for key in expected}
