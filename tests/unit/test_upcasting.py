"""Stored state of an older ``class_version`` reaches its class's current shape, one step at a
time, wherever it is read: the domain's mapper, snapshots and projections share one rule."""

from __future__ import annotations

from typing import Any, ClassVar, Final
from uuid import uuid4

import orjson
import pytest

from runledger.domain.catalogue import EVENT_CLASSES
from runledger.domain.events import upcast
from runledger.domain.ports import LogEntry
from runledger.domain.runs import Run
from runledger.infrastructure.commits.mapper import LedgerMapper, LedgerStoredEvent
from runledger.projections.events import projected


class Versioned:
    """A class at version 3 whose upcasters record the steps they took."""

    class_version: ClassVar[int] = 3

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["steps"] = [*state.get("steps", []), "v1->v2"]

    @staticmethod
    def upcast_v2_v3(state: dict[str, Any]) -> None:
        state["steps"] = [*state.get("steps", []), "v2->v3"]


def test_state_without_a_version_is_version_one_and_takes_every_step_in_order() -> None:
    state: dict[str, Any] = {"value": 1}
    upcast(Versioned, state)
    assert state == {"value": 1, "steps": ["v1->v2", "v2->v3"]}


def test_state_stored_at_a_later_version_takes_only_the_steps_after_it() -> None:
    state: dict[str, Any] = {"class_version": 2}
    upcast(Versioned, state)
    assert state == {"steps": ["v2->v3"]}


def test_current_state_loses_only_its_version_key() -> None:
    state: dict[str, Any] = {"class_version": 3, "value": 1}
    upcast(Versioned, state)
    assert state == {"value": 1}


def test_state_of_an_unknown_class_is_left_as_stored() -> None:
    state: dict[str, Any] = {"value": 1}
    upcast(None, state)
    assert state == {"value": 1}


class PausedV2(Run.Paused):
    """As if run.paused had gained a ``reason`` field in version 2."""

    class_version = 2
    reason: str

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        state["reason"] = state.get("status_detail") or "unknown"


STORED_V1_PAUSE: Final = {
    "timestamp": "2024-05-01T12:00:00+00:00",
    "actor": {"type": "system", "id": None},
    "run_id": "r",
    "status_detail": "x",
}


@pytest.fixture
def paused_v2(monkeypatch: pytest.MonkeyPatch) -> None:
    """The catalogue resolves run.paused to version 2 of the event."""
    monkeypatch.setitem(EVENT_CLASSES, "run.paused", PausedV2)


@pytest.mark.usefixtures("paused_v2")
def test_the_mapper_upcasts_an_older_stored_event() -> None:
    event = LedgerMapper().to_domain_event(
        LedgerStoredEvent(uuid4(), 4, "run.paused", orjson.dumps(STORED_V1_PAUSE))
    )
    assert type(event) is PausedV2
    assert vars(event)["reason"] == "x"
    assert "class_version" not in vars(event)


@pytest.mark.usefixtures("paused_v2")
def test_an_older_version_of_an_event_is_upcast_before_projections_see_it() -> None:
    event = projected(LogEntry(7, "run.paused", uuid4(), 3, orjson.dumps(STORED_V1_PAUSE)))
    assert event["reason"] == "x"
    assert "class_version" not in event.data
