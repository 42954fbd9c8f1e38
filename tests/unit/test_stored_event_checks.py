"""The quick passes of the stored-event checks (``domain.serialisation``) decide as the full
checks do: the aggregate id's 32-hex-digit form, a payload stored at the current version, and
the fields checked by their type alone."""

from __future__ import annotations

from uuid import UUID, uuid4

import orjson
import pytest
from eventsourcing.persistence import StoredEvent
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.errors import CorruptEventError
from runledger.domain.serialisation import _is_uuid_hex, decoded_state

RUN_CREATED = {
    "timestamp": "2026-01-01T00:00:00+00:00",
    "originator_topic": "run",
    "actor": {"type": "host", "id": None},
    "run_id": "run-1",
    "class_version": 2,
    "workflow_name": "echo",
    "workflow_ref": "echo",
    "title": None,
    "input": {},
    "status": "running",
    "parent_run_id": None,
    "root_run_id": "run-1",
    "lineage_kind": None,
    "restart_number": 0,
    "parent_terminal_fingerprint": None,
    "human_decision": None,
}
AGGREGATE = UUID("331bfa57-196a-55de-8a1a-9598fcebd302")


def stored(originator_id: UUID | str = AGGREGATE, **changes: object) -> StoredEvent:
    # The SQLite log holds the id as text.
    return StoredEvent(
        originator_id=originator_id,
        originator_version=1,
        topic="run.created",
        state=orjson.dumps({**RUN_CREATED, **changes}),
    )


def uuid_accepts(text: str) -> bool:
    try:
        UUID(text)
    except ValueError:
        return False
    return True


@settings(max_examples=500)
@given(
    st.one_of(
        st.text(min_size=30, max_size=34),
        st.text(alphabet="0123456789abcdefABCDEFgxz-+_ {}:", min_size=32, max_size=32),
        st.uuids().map(lambda uuid: uuid.hex),
    )
)
def test_the_quick_id_check_accepts_only_what_uuid_accepts(text: str) -> None:
    if _is_uuid_hex(text):
        assert uuid_accepts(text)
        assert UUID(text).hex == text.lower()


def test_the_quick_id_check_takes_the_hex_form_the_sqlite_log_stores() -> None:
    assert _is_uuid_hex(uuid4().hex)
    assert not _is_uuid_hex(str(uuid4()))  # left to UUID, which takes it too


@pytest.mark.parametrize(
    "originator_id",
    [
        "g" * 32,
        "-" + "0" * 31,
        "0" * 31,
        "0" * 33,
        "0" * 30 + "-",
        "",
    ],
)
def test_a_stored_aggregate_id_that_is_no_uuid_is_a_corrupt_event(originator_id: str) -> None:
    with pytest.raises(CorruptEventError, match="its aggregate id is not a UUID"):
        decoded_state(stored(originator_id))


@pytest.mark.parametrize(
    "originator_id",
    [AGGREGATE, AGGREGATE.hex, AGGREGATE.hex.upper(), str(AGGREGATE), "{" + str(AGGREGATE) + "}"],
)
def test_every_form_of_a_uuid_is_an_aggregate_id(originator_id: UUID | str) -> None:
    _, data = decoded_state(stored(originator_id))
    assert data["workflow_name"] == "echo"


def test_a_payload_at_the_current_version_loses_its_version_key_and_nothing_else() -> None:
    _, data = decoded_state(stored())
    assert "class_version" not in data
    assert data["human_decision"] is None


def test_a_payload_at_an_older_version_is_brought_up() -> None:
    changes = {"class_version": 1}
    payload = {**RUN_CREATED, **changes}
    del payload["human_decision"]
    event = StoredEvent(
        originator_id=AGGREGATE,
        originator_version=1,
        topic="run.created",
        state=orjson.dumps(payload),
    )
    _, data = decoded_state(event)
    assert "class_version" not in data
    assert data["human_decision"] is None


@pytest.mark.parametrize("version", [0, 3, "2", 2.0, True, None])
def test_a_version_outside_the_class_versions_is_a_corrupt_event(version: object) -> None:
    with pytest.raises(CorruptEventError, match=r"class_version .* is not between 1 and 2"):
        decoded_state(stored(class_version=version))


@pytest.mark.parametrize(
    ("field", "value", "says"),
    [
        ("workflow_name", 5, "field 'workflow_name' must be text, not a number"),
        ("title", [], "field 'title' must be text or null, not an array"),
        ("restart_number", "0", "field 'restart_number' must be an integer, not text"),
        ("restart_number", True, "field 'restart_number' must be an integer, not true or false"),
        ("status", "resting", "field 'status' must be one of"),
        ("actor", {"type": "host"}, "field 'actor' must be an object with a known actor type"),
        ("timestamp", "yesterday", "field 'timestamp' must be an ISO-8601 time"),
    ],
)
def test_a_field_of_the_wrong_kind_is_named_whichever_pass_finds_it(
    field: str, value: object, says: str
) -> None:
    with pytest.raises(CorruptEventError, match=says):
        decoded_state(stored(AGGREGATE, **{field: value}))


def test_the_first_field_at_fault_is_named_when_several_are() -> None:
    # ``timestamp`` (checked by a function) comes before ``workflow_name`` (by type alone).
    with pytest.raises(CorruptEventError, match="field 'timestamp'"):
        decoded_state(stored(timestamp="yesterday", workflow_name=5))
