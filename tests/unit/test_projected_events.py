"""Projections see every stored event in its event class's current shape."""

from __future__ import annotations

from typing import Any
from uuid import uuid4

import orjson
import pytest

from runledger.domain.catalogue import EVENT_CLASSES
from runledger.domain.ports import LogEntry
from runledger.domain.runs import Run
from runledger.projections.events import projected


def entry(topic: str, state: dict[str, Any]) -> LogEntry:
    return LogEntry(7, topic, uuid4(), 3, orjson.dumps(state))


def test_a_current_event_is_handed_over_as_stored() -> None:
    event = projected(entry("run.paused", {"timestamp": "t", "run_id": "r", "status_detail": "x"}))
    assert (event.position, event.wire_name, event.version) == (7, "run.paused", 3)
    assert event["status_detail"] == "x"


def test_an_older_version_of_an_event_is_upcast_before_projections_see_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    class PausedV2(Run.Paused):
        """As if run.paused had gained a ``reason`` field in version 2."""

        class_version = 2

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            state["reason"] = state.get("status_detail") or "unknown"

    monkeypatch.setitem(EVENT_CLASSES, "run.paused", PausedV2)
    event = projected(entry("run.paused", {"timestamp": "t", "run_id": "r", "status_detail": "x"}))
    assert event["reason"] == "x"
    assert "class_version" not in event.data
