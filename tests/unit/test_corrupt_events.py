"""Every field of every catalogue event is checked when it is read back, on both decode paths.

The pinned stored bytes of ``test_event_catalogue`` are the valid starting point; each case
drops one field or gives it a value of the wrong JSON type. The domain's mapper (aggregate
loads, ``event_log``) and the projections' decoder must both answer ``CorruptEventError``
naming the field; histories that are impossible as a sequence are refused on replay.
"""

from __future__ import annotations

from typing import Any, get_origin, get_type_hints
from uuid import UUID

import orjson
import pytest
from eventsourcing.persistence import Notification

from runledger.domain.catalogue import EVENT_CLASSES
from runledger.domain.errors import CorruptEventError
from runledger.domain.follow_ups import FollowUp
from runledger.domain.runs import Run
from runledger.infrastructure.commits.mapper import LedgerMapper
from runledger.projections.events import projected
from tests.unit.test_event_catalogue import EXPECTED

MAPPER = LedgerMapper()
POSITION = 41


def stored(wire_name: str, payload: object, version: int | None = None) -> Notification:
    originator_id, pinned_version, _, _, _ = EXPECTED[wire_name]
    return Notification(
        id=POSITION,
        originator_id=UUID(originator_id),
        originator_version=pinned_version if version is None else version,
        topic=wire_name,
        state=orjson.dumps(payload),
    )


def pinned_payload(wire_name: str) -> dict[str, Any]:
    payload: dict[str, Any] = orjson.loads(EXPECTED[wire_name][4])
    return payload


def payload_fields(wire_name: str) -> list[str]:
    """The sample's event fields; ``class_version`` is envelope, checked by its own tests."""
    return [name for name in pinned_payload(wire_name) if name != "class_version"]


def checked_fields(wire_name: str) -> list[str]:
    """The payload fields whose type is checked (a field typed Any takes any JSON value)."""
    hints = get_type_hints(EVENT_CLASSES[wire_name])
    return [name for name in payload_fields(wire_name) if hints[name] is not Any]


MISSING = [(wire, field) for wire in EXPECTED for field in payload_fields(wire)]
MISTYPED = [(wire, field) for wire in EXPECTED for field in checked_fields(wire)]


def refusals(event: Notification) -> list[CorruptEventError]:
    """The error of each decode path for ``event`` (each must refuse it)."""
    errors = []
    for decode in (MAPPER.to_domain_event, projected):
        with pytest.raises(CorruptEventError) as raised:
            decode(event)
        errors.append(raised.value)
    return errors


@pytest.mark.parametrize(("wire_name", "field"), MISSING, ids=[f"{w}:{f}" for w, f in MISSING])
def test_an_event_missing_any_field_is_corrupt_on_both_paths(wire_name: str, field: str) -> None:
    payload = {key: value for key, value in pinned_payload(wire_name).items() if key != field}
    for error in refusals(stored(wire_name, payload)):
        assert error.reason == f"field {field!r} is missing"
        assert (error.position, error.wire_name) == (POSITION, wire_name)


@pytest.mark.parametrize(("wire_name", "field"), MISTYPED, ids=[f"{w}:{f}" for w, f in MISTYPED])
def test_an_event_with_any_field_of_the_wrong_type_is_corrupt_on_both_paths(
    wire_name: str, field: str
) -> None:
    # An array is the wrong kind for every field but an array field; that one gets a bool.
    is_array = get_origin(get_type_hints(EVENT_CLASSES[wire_name])[field]) is list
    wrong, kind = (True, "true or false") if is_array else ([{"nested": True}], "an array")
    payload = {**pinned_payload(wire_name), field: wrong}
    for error in refusals(stored(wire_name, payload)):
        assert error.reason.startswith(f"field {field!r} must be ")
        assert error.reason.endswith(f", not {kind}")


@pytest.mark.parametrize("wire_name", list(EXPECTED))
def test_every_pinned_event_decodes_on_the_projection_path_too(wire_name: str) -> None:
    event = projected(stored(wire_name, pinned_payload(wire_name)))
    # The projections see the current version's fields; the version itself is envelope.
    assert event.data == {
        name: pinned_payload(wire_name)[name] for name in payload_fields(wire_name)
    }


def test_a_bool_is_not_an_integer_and_an_integer_is_not_a_bool() -> None:
    for field, value in (("restart_number", True), ("title", False)):
        [error, _] = refusals(
            stored("run.created", {**pinned_payload("run.created"), field: value})
        )
        assert error.reason.endswith("not true or false")
    finished = {**pinned_payload("run.finished"), "interrupted": 0}
    [error, _] = refusals(stored("run.finished", finished))
    assert error.reason == "field 'interrupted' must be true or false, not a number"


def test_a_first_event_at_a_later_version_is_corrupt() -> None:
    [error, _] = refusals(stored("run.created", pinned_payload("run.created"), version=2))
    assert error.reason == "version 2 is impossible for a first event"


def test_a_payload_that_is_not_an_object_is_corrupt() -> None:
    for payload, kind in (([1], "an array"), ("run", "text"), (None, "null"), (1.5, "a number")):
        [error, _] = refusals(stored("run.paused", payload))
        assert error.reason == f"its payload is {kind}, not a JSON object"


def test_the_error_shows_stored_text_escaped_and_clipped() -> None:
    wire_name = "\ud800" + "x" * 500
    [error, _] = refusals(
        Notification(
            id=3, originator_id=UUID(int=1), originator_version=1, topic=wire_name, state=b"{}"
        )
    )
    message = str(error)
    message.encode("utf-8")  # no lone surrogate reaches a log line or a terminal
    assert "'\\ud800xxx" in message
    assert len(message) < 400


# -- histories impossible as a sequence ---------------------------------------------------------


def decoded(wire_name: str, version: int | None = None, **changes: Any) -> Any:
    return MAPPER.to_domain_event(
        stored(wire_name, {**pinned_payload(wire_name), **changes}, version)
    )


def test_an_event_of_another_aggregate_in_a_run_history_is_corrupt() -> None:
    run = decoded("run.created").mutate(None)
    assert isinstance(run, Run)
    removed = decoded("follow-up.removed", version=2)
    with pytest.raises(CorruptEventError, match="it does not belong to a Run"):
        removed.mutate(run)


def test_an_event_that_skips_a_version_is_corrupt() -> None:
    run = decoded("run.created").mutate(None)
    paused = decoded("run.paused", version=3)
    with pytest.raises(CorruptEventError, match="it does not follow version 1"):
        paused.mutate(run)


def test_a_history_that_does_not_start_with_its_first_event_is_corrupt() -> None:
    paused = decoded("run.paused", version=2)
    with pytest.raises(CorruptEventError, match="its aggregate has no first event before it"):
        paused.mutate(None)


def test_a_first_event_builds_the_aggregate_that_declares_it() -> None:
    assert type(decoded("follow-up.queued").mutate(None)) is FollowUp


# -- snapshots ----------------------------------------------------------------------------------


SNAPSHOT_STATE: dict[str, Any] = {
    "_created_on": "2026-01-01T00:00:00+00:00",
    "_modified_on": "2026-01-01T00:00:00+00:00",
    "finished_at": None,
}


def snapshot(topic: object, state: object) -> Notification:
    payload = {"timestamp": "2026-01-01T00:00:00+00:00", "topic": topic, "state": state}
    return Notification(
        id=POSITION,
        originator_id=UUID(int=7),
        originator_version=100,
        topic="run.snapshot",
        state=orjson.dumps(payload),
    )


def test_a_snapshot_naming_another_aggregate_is_corrupt() -> None:
    with pytest.raises(CorruptEventError) as raised:
        MAPPER.to_domain_event(snapshot("follow-up", SNAPSHOT_STATE))
    assert raised.value.reason == (
        "field 'topic' must be 'run', the aggregate of this event, not text"
    )


@pytest.mark.parametrize(
    "state",
    [
        "state",
        {**SNAPSHOT_STATE, "_created_on": None},
        {**SNAPSHOT_STATE, "finished_at": "soon"},
    ],
    ids=["not an object", "no creation time", "garbage datetime field"],
)
def test_a_snapshot_with_unreadable_state_is_corrupt(state: object) -> None:
    with pytest.raises(CorruptEventError, match="field 'state' must be an object of aggregate"):
        MAPPER.to_domain_event(snapshot("run", state))
