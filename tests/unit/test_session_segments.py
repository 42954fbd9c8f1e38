"""Rules of session recording (upstream §3.12, §2.6; decisions 21, 26)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from runledger.domain.canonical import canonical_json, sha256hex
from runledger.domain.errors import (
    CaptureFailureForbiddenError,
    CaptureFailureRequiredError,
    IncrementalSessionEventError,
    InvalidSessionCaptureError,
    InvalidSessionEventSeqError,
    NonFiniteJsonNumberError,
    SessionBindingMismatchError,
    SessionCaptureStoppedError,
    SessionEventEnvelopeError,
    SessionEventTooLargeError,
    UnexpectedSessionEventSeqError,
)
from runledger.domain.session_segments import (
    COUNTS_DIAGNOSTIC,
    RECORDING_DIAGNOSTIC,
    SessionSegment,
    check_binding,
    check_capture,
    segment_id_for,
    small_batch,
)
from runledger.domain.values import CaptureStatus
from tests.support.specification import Event, events_of, given

NOW = datetime(2026, 1, 1, tzinfo=UTC)
BINDING = {
    "schema": "pi-workflows.session-binding.v1",
    "runId": "run-1",
    "piSessionId": "session-1",
    "boundAt": "2026-01-01T00:00:00.000Z",
}
SegmentStep = Callable[[SessionSegment], object]


def record(seq: Any = 1, **changes: Any) -> dict[str, Any]:
    event = {
        "seq": seq,
        "at": "2026-01-01T00:00:01.000Z",
        "type": "message_finished",
        "nodeId": "ask",
        "attemptId": "attempt-1",
        "payload": {"text": "hi"},
    }
    event.update(changes)
    return {key: value for key, value in event.items() if value is not ...}


def capture(status: CaptureStatus = "recording", **changes: Any) -> dict[str, Any]:
    value: dict[str, Any] = {
        "schema": "pi-workflows.session-capture.v1",
        "eventSchema": "pi-workflows.session-event.v1",
        "status": status,
        "entryCount": 0,
        "eventCount": 0,
    }
    if status == "failed":
        value["failure"] = {"message": "lost"}
    value.update(changes)
    return value


def segment() -> SessionSegment:
    return SessionSegment.bind(
        segment_id_for("run-1", None),
        run_id="run-1",
        attempt_id=None,
        session_id="session-1",
        binding=BINDING,
        now=NOW,
    )


def appended(*records: dict[str, Any]) -> SegmentStep:
    return lambda s: s.append_events(list(records), now=NOW)


def captured(status: CaptureStatus, **changes: Any) -> SegmentStep:
    return lambda s: s.update_capture(capture(status, **changes), status, now=NOW)


def history(*steps: SegmentStep) -> list[Event]:
    return events_of(segment(), *steps)


def test_the_segment_id_is_upstreams_with_an_empty_attempt_for_the_run_level() -> None:
    assert segment_id_for("run-1", None) == "segment-" + sha256hex("run-1\0")[:40]
    assert segment_id_for("run-1", "a-1") == "segment-" + sha256hex("run-1\0a-1")[:40]


@pytest.mark.parametrize(
    "binding",
    [
        {**BINDING, "runId": "run-2"},
        {**BINDING, "schema": "pi-workflows.session-binding.v2"},
        "binding",
        None,
    ],
)
def test_a_binding_must_name_the_run_and_the_v1_schema(binding: object) -> None:
    with pytest.raises(SessionBindingMismatchError) as caught:
        check_binding("run-1", binding)
    assert str(caught.value) == "Session binding does not match the workflow run"


def test_binding_creates_a_recording_segment_acting_as_the_session() -> None:
    created = (
        given(SessionSegment, [])
        .when_creating(segment)
        .then(
            [
                (
                    "session.segment-created",
                    {"session_id": "session-1", "attempt_id": None, "binding": BINDING},
                )
            ]
        )
    )
    assert (created.status, created.entry_count, created.event_count) == ("recording", 0, 0)


def test_an_entry_takes_its_id_or_entry_seq() -> None:
    seg = given(SessionSegment, history(lambda s: s.append_entry({"id": "e-1"}, now=NOW)))
    seg.when(lambda s: s.append_entry({"type": "message"}, now=NOW)).then(
        [("session.entry-appended", {"entry_seq": 2, "entry_id": "entry-2"})]
    )


def test_a_batch_is_recorded_as_one_event() -> None:
    given(SessionSegment, history()).when(appended(record(1), record(2), record(3))).then(
        [("session.events-appended", {"first_seq": 1, "last_seq": 3})]
    )


def test_an_empty_batch_records_nothing() -> None:
    given(SessionSegment, history()).when(appended()).then([])


def test_a_batch_continues_from_the_last_recorded_seq() -> None:
    given(SessionSegment, history(appended(record(1)))).when(appended(record(3))).then_raises(
        UnexpectedSessionEventSeqError, "Expected session event seq 2, got 3"
    )


@pytest.mark.parametrize("seq", [0, -1, 2**53, 1.0, "1", True, None])
def test_a_seq_must_be_a_positive_safe_integer(seq: object) -> None:
    given(SessionSegment, history()).when(appended(record(seq))).then_raises(
        InvalidSessionEventSeqError, "Session event seq must be a positive safe integer"
    )


@pytest.mark.parametrize(
    "changes",
    [
        {"at": ...},
        {"at": ""},
        {"nodeId": None},
        {"attemptId": ...},
        {"payload": []},
        {"type": "custom"},
    ],
    ids=["no at", "empty at", "null node", "no attempt", "list payload", "unknown type"],
)
def test_a_record_needs_its_envelope(changes: dict[str, Any]) -> None:
    given(SessionSegment, history()).when(appended(record(1, **changes))).then_raises(
        SessionEventEnvelopeError, "Session event is missing required envelope fields"
    )


@pytest.mark.parametrize("delta", ["text_delta", "thinking_delta", "toolcall_delta"])
def test_incremental_assistant_deltas_are_refused(delta: str) -> None:
    event = record(1, type="assistant_event", payload={"type": delta})
    given(SessionSegment, history()).when(appended(event)).then_raises(
        IncrementalSessionEventError,
        "Incremental assistant events are not durable session facts",
    )


def test_a_completed_assistant_event_is_durable() -> None:
    event = record(1, type="assistant_event", payload={"type": "text_end"})
    given(SessionSegment, history()).when(appended(event)).then(
        [("session.events-appended", {"last_seq": 1})]
    )


def test_the_checks_run_in_the_codes_order_delta_before_seq() -> None:
    event = record(5, type="assistant_event", payload={"type": "text_delta"})
    given(SessionSegment, history()).when(appended(event)).then_raises(
        IncrementalSessionEventError,
        "Incremental assistant events are not durable session facts",
    )


def test_a_record_over_one_mebibyte_is_refused() -> None:
    event = record(1, payload={"text": "x" * 1_048_576})
    given(SessionSegment, history()).when(appended(event)).then_raises(
        SessionEventTooLargeError, "session event exceeded 1048576 bytes"
    )


def test_a_record_just_at_one_mebibyte_is_kept() -> None:
    event = record(1, payload={"text": ""})
    padding = 1_048_576 - len(canonical_json(event).encode())
    event["payload"]["text"] = "é" * (padding // 2) + "x" * (padding % 2)
    given(SessionSegment, history()).when(appended(event)).then(
        [("session.events-appended", {"last_seq": 1})]
    )


@pytest.mark.parametrize("number", [float("nan"), float("inf")])
def test_a_record_with_a_non_finite_number_is_refused(number: float) -> None:
    event = record(1, payload={"score": number})
    given(SessionSegment, history()).when(appended(event)).then_raises(
        NonFiniteJsonNumberError, "JSON numbers must be finite"
    )


def test_a_batch_of_plain_small_records_proves_every_size_at_once() -> None:
    assert small_batch([record(seq) for seq in range(1, 65)])
    assert not small_batch([record(1), record(2, payload={"score": float("nan")})])
    assert not small_batch([record(1), record(2, payload={"text": "x" * 400_000})])


def test_a_large_record_is_refused_before_a_later_records_seq() -> None:
    big = record(1, payload={"text": "x" * 1_048_576})
    given(SessionSegment, history()).when(appended(big, record(3))).then_raises(
        SessionEventTooLargeError, "session event exceeded 1048576 bytes"
    )
    given(SessionSegment, history()).when(appended(record(2), big)).then_raises(
        UnexpectedSessionEventSeqError, "Expected session event seq 1, got 2"
    )


def test_one_bad_record_refuses_the_whole_batch() -> None:
    given(SessionSegment, history()).when(appended(record(1), record(3))).then_raises(
        UnexpectedSessionEventSeqError, "Expected session event seq 2, got 3"
    )


@pytest.mark.parametrize("status", ["complete", "failed"])
def test_a_stopped_capture_takes_no_more_events(status: CaptureStatus) -> None:
    given(SessionSegment, history(captured(status))).when(appended(record(1))).then_raises(
        SessionCaptureStoppedError, "Session event capture has stopped"
    )


@pytest.mark.parametrize(
    "value",
    [
        capture(schema="other"),
        capture(eventSchema="other"),
        capture(status="done"),  # type: ignore[arg-type]
        capture(entryCount=-1),
        capture(eventCount=1.5),
        capture(eventCount=True),
        "capture",
    ],
)
def test_an_invalid_capture_projection_is_refused(value: object) -> None:
    with pytest.raises(InvalidSessionCaptureError) as caught:
        check_capture(value)
    assert str(caught.value) == "Invalid session capture projection"


def test_a_failed_capture_needs_failure_details() -> None:
    with pytest.raises(CaptureFailureRequiredError):
        check_capture(capture("failed", failure=None))


@pytest.mark.parametrize("status", ["recording", "complete"])
def test_only_a_failed_capture_carries_failure_details(status: CaptureStatus) -> None:
    with pytest.raises(CaptureFailureForbiddenError):
        check_capture(capture(status, failure={"message": "x"}))


@pytest.mark.parametrize(
    ("ended", "update"), [("failed", "complete"), ("failed", "recording"), ("complete", "failed")]
)
def test_an_ended_capture_ignores_updates_to_another_status(
    ended: CaptureStatus, update: CaptureStatus
) -> None:
    given(SessionSegment, history(captured(ended))).when(captured(update)).then([])


@pytest.mark.parametrize("status", ["complete", "failed"])
def test_an_ended_capture_takes_an_update_of_the_same_status(status: CaptureStatus) -> None:
    seg = given(SessionSegment, history(captured(status))).when(captured(status))
    seg.then([("session.capture-updated", {})])


def test_integrity_reports_counts_that_do_not_match_the_recorded_rows() -> None:
    seg = given(SessionSegment, history(appended(record(1)), captured("complete"))).aggregate
    assert seg is not None
    assert seg.to_record().diagnostics == [COUNTS_DIAGNOSTIC]
    assert seg.to_record().integrity == "invalid"


def test_integrity_reports_an_ended_run_still_recording() -> None:
    seg = given(SessionSegment, history()).aggregate
    assert seg is not None
    assert seg.to_record(run_has_ended=True).diagnostics == [RECORDING_DIAGNOSTIC]
    assert seg.to_record(run_has_ended=False).integrity == "valid"
