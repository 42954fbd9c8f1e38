"""The store's own limits are a safety net above upstream's (decision 28): upstream's checks
decide first, in upstream's order, with upstream's messages, and a value upstream accepts
passes the store's limits. Both sides of each limit, on every backend."""

from __future__ import annotations

from typing import Any, Final

import pytest

from runledger.domain.canonical import canonical_json
from runledger.domain.errors import (
    IncrementalSessionEventError,
    InvalidEffectLabelError,
    InvalidSessionEventSeqError,
    InvalidSettingsPolicyError,
    PromptTooLargeError,
    SessionEventBatchTooLargeError,
    SessionEventEnvelopeError,
    SessionEventTooLargeError,
    SettingsTooLargeError,
    UnexpectedSessionEventSeqError,
    ValueTooLargeError,
    WorkflowError,
)
from runledger.domain.values import (
    MAX_ARGUMENT_TEXT_BYTES,
    MAX_ARGUMENT_VALUES,
    MAX_SESSION_BATCH_BYTES,
    Actor,
)
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import assert_rejected
from tests.support.scenario import RUN, SESSION, running_run
from tests.support.sessions import session_binding

MIB: Final = 1_048_576
HUMAN: Final = Actor("human", "user-1")


def record(seq: int, size: int, changes: dict[str, Any] | None = None) -> dict[str, Any]:
    """A durable session event record whose canonical JSON is exactly ``size`` bytes."""
    shaped = {
        "seq": seq,
        "at": "2026-01-01T00:00:01.000Z",
        "type": "tool_execution_finished",
        "nodeId": "ask",
        "attemptId": "attempt-1",
        "payload": {"pad": ""},
        **(changes or {}),
    }
    padding = size - len(canonical_json(shaped).encode())
    assert padding >= 0
    if isinstance(shaped["payload"], dict) and "pad" in shaped["payload"]:
        shaped["payload"] = {**shaped["payload"], "pad": "x" * padding}
    return shaped


def records(*sizes: int) -> list[dict[str, Any]]:
    return [record(seq, size) for seq, size in enumerate(sizes, start=1)]


@pytest.fixture
def recording(store: WorkflowStore) -> WorkflowStore:
    """A running run whose session is being recorded."""
    running_run(store)
    store.record_session_binding(RUN, session_binding(RUN, SESSION))
    return store


# -- session event records and batches (§3.12) ----------------------------------------------


def test_a_batch_of_two_600_kb_events_is_recorded(recording: WorkflowStore) -> None:
    segment = recording.append_session_events(RUN, records(600_000, 600_000))
    assert segment is not None
    assert segment.event_count == 2


def test_a_record_of_exactly_1_mib_is_recorded_and_one_byte_more_is_refused(
    recording: WorkflowStore,
) -> None:
    segment = recording.append_session_events(RUN, records(MIB))
    assert segment is not None
    assert segment.event_count == 1
    assert_rejected(
        recording,
        SessionEventTooLargeError,
        "session event exceeded 1048576 bytes",
        recording.append_session_events,
        RUN,
        [record(2, MIB + 1)],
    )


@pytest.mark.parametrize(
    ("changes", "error", "message"),
    [
        (
            {"seq": 0},
            InvalidSessionEventSeqError,
            "Session event seq must be a positive safe integer",
        ),
        (
            {"at": ""},
            SessionEventEnvelopeError,
            "Session event is missing required envelope fields",
        ),
        (
            {"type": "assistant_event", "payload": {"type": "text_delta", "pad": ""}},
            IncrementalSessionEventError,
            "Incremental assistant events are not durable session facts",
        ),
        ({"seq": 7}, UnexpectedSessionEventSeqError, "Expected session event seq 1, got 7"),
    ],
    ids=["seq", "envelope", "delta", "expected-seq"],
)
def test_a_record_over_1_mib_gets_upstreams_earlier_checks_first(
    recording: WorkflowStore, changes: dict[str, Any], error: type[WorkflowError], message: str
) -> None:
    assert_rejected(
        recording,
        error,
        message,
        recording.append_session_events,
        RUN,
        [record(1, 2 * MIB, changes)],
    )


@pytest.mark.slow
def test_a_batch_of_64_records_of_1_mib_is_recorded(recording: WorkflowStore) -> None:
    batch = records(*[MIB] * 64)
    assert sum(len(canonical_json(r).encode()) for r in batch) == MAX_SESSION_BATCH_BYTES
    segment = recording.append_session_events(RUN, batch)
    assert segment is not None
    assert segment.event_count == 64
    # Projected again from the log, the 64 MiB event's rows go out in a page of their own.
    before = [recording.read_model_digest(name) for name in recording.projection_names()]
    for name in recording.projection_names():
        recording.rebuild_projection(name)
    assert [recording.read_model_digest(name) for name in recording.projection_names()] == before


def test_a_batch_one_byte_over_64_mib_is_refused_after_every_record_passed(
    recording: WorkflowStore,
) -> None:
    batch = records(*[MIB] * 63, MIB - 999, 1000)
    assert sum(len(canonical_json(r).encode()) for r in batch) == MAX_SESSION_BATCH_BYTES + 1
    assert_rejected(
        recording,
        SessionEventBatchTooLargeError,
        f"Workflow session event batch exceeded {MAX_SESSION_BATCH_BYTES} bytes of records",
        recording.append_session_events,
        RUN,
        batch,
    )


def test_a_bad_record_at_the_end_of_an_oversized_batch_gets_its_own_error(
    recording: WorkflowStore,
) -> None:
    batch = [*records(*[MIB] * 64), record(66, 1000)]
    assert_rejected(
        recording,
        UnexpectedSessionEventSeqError,
        "Expected session event seq 65, got 66",
        recording.append_session_events,
        RUN,
        batch,
    )


# -- prompts and effect labels ---------------------------------------------------------------


def test_a_10_mib_prompt_gets_upstreams_size_message(store: WorkflowStore) -> None:
    running_run(store)
    assert_rejected(
        store,
        PromptTooLargeError,
        "Workflow follow-up prompt cannot exceed 65536 bytes",
        store.queue_follow_up,
        RUN,
        request_id="big",
        target_session_id=SESSION,
        actor=HUMAN,
        source="limits",
        prompt="x" * (10 * MIB),
    )


@pytest.mark.parametrize("label", ["effect_type", "key"])
def test_an_effect_label_of_2_mib_gets_upstreams_label_message(
    store: WorkflowStore, label: str
) -> None:
    running_run(store)
    arguments = {"effect_type": "email", "key": "k", label: "k" * (2 * MIB)}
    name = "type" if label == "effect_type" else "key"
    assert_rejected(
        store,
        InvalidEffectLabelError,
        f"Managed effect {name} must be nonempty text of at most 256 characters",
        store.reserve_effect,
        RUN,
        request={},
        **arguments,
    )


# -- settings (§9.1, §9.2) -------------------------------------------------------------------


def policy(max_bytes: int) -> dict[str, Any]:
    return {
        "rules": [{"path": "/notes", "permissions": {"human": ["read", "add", "remove"]}}],
        "max_bytes": max_bytes,
    }


def test_settings_of_2_mib_get_the_policys_size_message(store: WorkflowStore) -> None:
    running_run(store)
    assert_rejected(
        store,
        SettingsTooLargeError,
        "Workflow settings cannot exceed 65536 bytes",
        store.ensure_settings_scope,
        RUN,
        settings={"notes": ["x" * (2 * MIB)]},
        policy=policy(65536),
    )


def test_a_policy_may_allow_1_mib_of_settings_and_no_more(store: WorkflowStore) -> None:
    running_run(store)
    assert_rejected(
        store,
        InvalidSettingsPolicyError,
        f"Workflow settings policy is invalid: max_bytes must be at most {MAX_ARGUMENT_TEXT_BYTES}",
        store.ensure_settings_scope,
        RUN,
        settings={"notes": []},
        policy=policy(MIB + 1),
    )
    # 1 MiB of canonical JSON made of more values than the door's old limit of 100,000.
    settings: dict[str, Any] = {"notes": [0] * 500_000, "pad": ""}
    settings["pad"] = "x" * (MIB - len(canonical_json(settings).encode()))
    assert len(canonical_json(settings).encode()) == MIB
    scope = store.ensure_settings_scope(RUN, settings=settings, policy=policy(MIB))
    assert scope.settings == settings


def test_a_2_mib_patch_gets_the_policys_size_message_first(store: WorkflowStore) -> None:
    running_run(store)
    created = store.ensure_settings_scope(RUN, settings={"notes": []}, policy=policy(65536))
    assert_rejected(
        store,
        SettingsTooLargeError,
        "Workflow settings cannot exceed 65536 bytes",
        store.change_settings,
        RUN,
        created.scope_id,
        request_id="big",
        actor=HUMAN,
        source="limits",
        patch=[{"op": "add", "path": "/notes/-", "value": "x" * (2 * MIB)}],
    )


def test_a_patch_that_fits_the_policy_meets_the_doors_limit_after_every_rule(
    store: WorkflowStore,
) -> None:
    running_run(store)
    created = store.ensure_settings_scope(RUN, settings={"notes": []}, policy=policy(65536))

    def add_and_remove(text_bytes: int) -> list[dict[str, Any]]:
        return [
            {"op": "add", "path": "/notes/-", "value": "x" * text_bytes},
            {"op": "remove", "path": "/notes/0"},
        ]

    # Its text: the value, the two paths and the op names and keys ("op", "path", ...).
    framing = sum(len(k) + len(v) for op in add_and_remove(0) for k, v in op.items())
    changed = store.change_settings(
        RUN,
        created.scope_id,
        request_id="fits",
        actor=HUMAN,
        source="limits",
        patch=add_and_remove(MAX_ARGUMENT_TEXT_BYTES - framing),
    )
    assert changed.scope.settings == {"notes": []}
    assert_rejected(
        store,
        ValueTooLargeError,
        f"Workflow argument patch holds more than {MAX_ARGUMENT_VALUES} values or "
        f"{MAX_ARGUMENT_TEXT_BYTES} bytes of text",
        store.change_settings,
        RUN,
        created.scope_id,
        request_id="over",
        actor=HUMAN,
        source="limits",
        patch=add_and_remove(MAX_ARGUMENT_TEXT_BYTES - framing + 1),
    )


# -- arguments no upstream rule sizes --------------------------------------------------------


def test_an_input_of_the_most_values_is_accepted_and_one_value_more_is_refused(
    store: WorkflowStore,
) -> None:
    values = [0] * MAX_ARGUMENT_VALUES
    store.create_run("run-wide", workflow_name="echo", input=values)
    assert_rejected(
        store,
        ValueTooLargeError,
        f"Workflow argument input holds more than {MAX_ARGUMENT_VALUES} values or "
        f"{MAX_ARGUMENT_TEXT_BYTES} bytes of text",
        store.create_run,
        "run-wider",
        workflow_name="echo",
        input=[*values, 0],
    )
