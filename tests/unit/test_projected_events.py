"""Projections see a stored event as stored, decoded (older versions: ``test_upcasting``)."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import orjson

from runledger.domain.ports import LogEntry
from runledger.projections.events import projected


def entry(topic: str, state: dict[str, Any]) -> LogEntry:
    return LogEntry(7, topic, uuid4(), 3, orjson.dumps(state))


PAUSED: dict[str, Any] = {
    "timestamp": "2026-01-01T00:00:00+00:00",
    "actor": {"type": "system", "id": None},
    "run_id": "r",
    "status_detail": "x",
}


def test_a_current_event_is_handed_over_as_stored() -> None:
    event = projected(entry("run.paused", PAUSED))
    assert (event.position, event.wire_name, event.version) == (7, "run.paused", 3)
    assert event["status_detail"] == "x"
