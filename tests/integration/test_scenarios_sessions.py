"""Session recording through the store, on every backend (upstream §3.12; decisions 21, 26)."""

from __future__ import annotations

import pytest

from runledger.domain.errors import (
    ClaimLostError,
    InvalidCaptureAttemptError,
    InvalidPageError,
    InvalidSessionEntryError,
    InvalidSessionEventBatchError,
    InvalidSessionIdError,
    RunMissingError,
    SessionBindingMismatchError,
    SessionCaptureStoppedError,
    SessionSegmentMissingError,
    UnexpectedSessionEventSeqError,
)
from runledger.domain.session_segments import segment_id_for
from runledger.domain.values import MAX_COUNT
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import assert_rejected, recording
from tests.support.scenario import RUN, create
from tests.support.sessions import session_binding
from tests.support.sessions import session_capture as capture
from tests.support.sessions import session_events as events

BINDING = session_binding(RUN, "pi-1")


def bound(store: WorkflowStore, attempt_id: str | None = None) -> None:
    create(store)
    store.record_session_binding(RUN, BINDING, attempt_id=attempt_id)


def test_binding_creates_a_segment_and_binds_the_origin_session(store: WorkflowStore) -> None:
    create(store)
    with recording(store) as recorded:
        segment = store.record_session_binding(RUN, BINDING)
    assert segment.segment_id == segment_id_for(RUN, None)
    assert (segment.session_id, segment.status) == ("pi-1", "recording")
    assert recorded.wire_names == ["run.session-bound", "session.segment-created"]
    run = store.get_run(RUN)
    assert run is not None
    assert (run.origin_session_id, run.execution_mode) == ("pi-1", "interactive")


def test_binding_again_is_a_no_op(store: WorkflowStore) -> None:
    bound(store)
    with recording(store) as recorded:
        store.record_session_binding(RUN, {**BINDING, "piSessionId": "pi-2"})
    assert recorded.wire_names == []


def test_an_attempts_segment_keeps_the_first_origin_binding(store: WorkflowStore) -> None:
    bound(store)
    with recording(store) as recorded:
        store.record_session_binding(RUN, {**BINDING, "piSessionId": "pi-2"}, attempt_id="a-1")
    assert recorded.wire_names == ["session.segment-created"]
    run = store.get_run(RUN)
    assert run is not None
    assert run.origin_session_id == "pi-1"
    assert [s.attempt_id for s in store.session_segments(RUN)] == [None, "a-1"]


def test_entries_are_numbered_per_segment_and_read_back_in_pages(store: WorkflowStore) -> None:
    bound(store)
    assert store.append_session_entry(RUN, {"id": "e-1", "role": "user"}) == 1
    assert store.append_session_entry(RUN, {"role": "assistant"}) == 2
    page = store.session_entries(RUN, start=1, limit=5)
    assert [(e.entry_seq, e.entry_id, e.entry) for e in page] == [
        (2, "entry-2", {"role": "assistant"})
    ]


def test_a_page_may_start_and_reach_as_far_as_any_count(store: WorkflowStore) -> None:
    # The largest count a backend holds, past a start: their sum is beyond what a page of
    # a stream can take, and must still mean "to the end" (hypothesis found a ValueError).
    bound(store)
    store.append_session_entry(RUN, {"id": "e-1", "role": "user"})
    store.append_session_entry(RUN, {"role": "assistant"})

    entries = store.session_entries(RUN, start=1, limit=MAX_COUNT)
    events_ = store.session_events(RUN, start=MAX_COUNT, limit=MAX_COUNT)

    assert [entry.entry_seq for entry in entries] == [2]
    assert events_ == []


def test_a_batch_of_events_is_stored_as_one_event_and_read_back_by_record(
    store: WorkflowStore,
) -> None:
    bound(store)
    with recording(store) as recorded:
        segment = store.append_session_events(RUN, events(1, 64))
    assert recorded.wire_names == ["session.events-appended"]
    assert segment is not None
    assert (segment.event_count, segment.last_event_seq) == (64, 64)
    page = store.session_events(RUN, start=60, limit=10)
    assert [(e.seq, e.payload) for e in page] == [(n, {"n": n}) for n in range(61, 65)]


def test_an_empty_batch_writes_nothing(store: WorkflowStore) -> None:
    bound(store)
    with recording(store) as recorded:
        assert store.append_session_events(RUN, []) is None
    assert recorded.wire_names == []


def test_a_batch_with_a_gap_is_refused_whole(store: WorkflowStore) -> None:
    bound(store)
    store.append_session_events(RUN, events(1, 2))
    assert_rejected(
        store,
        UnexpectedSessionEventSeqError,
        "Expected session event seq 4, got 5",
        store.append_session_events,
        RUN,
        events(3, 1) + events(5, 1),
    )


def test_a_complete_capture_stops_events_and_ignores_a_failed_update(
    store: WorkflowStore,
) -> None:
    bound(store)
    store.append_session_events(RUN, events(1, 1))
    store.update_session_capture(RUN, capture("complete", 0, 1))
    with recording(store) as recorded:
        segment = store.update_session_capture(
            RUN, capture("failed", 0, 1, failure={"message": "late"})
        )
    assert recorded.wire_names == []
    assert segment.status == "complete"
    assert_rejected(
        store,
        SessionCaptureStoppedError,
        "Session event capture has stopped",
        store.append_session_events,
        RUN,
        events(2, 1),
    )


def test_segments_report_upstreams_integrity_diagnostics(store: WorkflowStore) -> None:
    bound(store)
    store.append_session_entry(RUN, {"id": "e-1"})
    store.update_session_capture(RUN, capture("recording", 5, 0))
    store.finish_run(RUN, status="completed")
    (segment,) = store.session_segments(RUN)
    assert segment.integrity == "invalid"
    assert segment.diagnostics == [
        "session capture counts do not match durable rows",
        "terminal run still reports recording capture",
    ]


def test_a_consistent_capture_is_valid(store: WorkflowStore) -> None:
    bound(store)
    store.append_session_entry(RUN, {"id": "e-1"})
    store.update_session_capture(RUN, capture("complete", 1, 0))
    store.finish_run(RUN, status="completed")
    (segment,) = store.session_segments(RUN)
    assert (segment.integrity, segment.diagnostics) == ("valid", [])


def test_an_unknown_run_has_no_segments(store: WorkflowStore) -> None:
    assert store.session_segments("nope") == []
    assert store.session_events("nope") == []


def test_session_writes_on_a_claimed_run_need_the_claim(store: WorkflowStore) -> None:
    bound(store)
    claim = store.claim_run(RUN, owner_type="controller", owner_id="worker-1")
    assert claim is not None
    message = f"Workflow run claim lost (missingAuthority): {RUN}"
    assert_rejected(store, ClaimLostError, message, store.append_session_entry, RUN, {"id": "e"})
    assert_rejected(store, ClaimLostError, message, store.append_session_events, RUN, events(1, 1))
    assert_rejected(
        store,
        ClaimLostError,
        message,
        store.update_session_capture,
        RUN,
        capture("recording", 0, 0),
    )
    store.append_session_events(RUN, events(1, 1), authority=claim)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "binding",
    [{**BINDING, "runId": "run-2"}, {**BINDING, "schema": "v2"}, None, "binding"],
)
def test_a_mismatched_binding_is_refused(store: WorkflowStore, binding: object) -> None:
    create(store)
    assert_rejected(
        store,
        SessionBindingMismatchError,
        "Session binding does not match the workflow run",
        store.record_session_binding,
        RUN,
        binding,
    )


def test_a_binding_without_a_session_id_is_refused(store: WorkflowStore) -> None:
    create(store)
    assert_rejected(
        store,
        InvalidSessionIdError,
        "Workflow Pi session ID must be a non-empty string",
        store.record_session_binding,
        RUN,
        {**BINDING, "piSessionId": ""},
    )


def test_binding_a_missing_run_is_refused(store: WorkflowStore) -> None:
    assert_rejected(
        store,
        RunMissingError,
        f"Workflow run is missing: {RUN}",
        store.record_session_binding,
        RUN,
        BINDING,
    )


def test_recording_into_a_missing_segment_is_refused(store: WorkflowStore) -> None:
    create(store)
    message = f"Session capture segment is missing: {segment_id_for(RUN, 'a-9')}"
    for command, argument in (
        (store.append_session_entry, {"id": "e"}),
        (store.append_session_events, events(1, 1)),
        (store.update_session_capture, capture("recording", 0, 0)),
    ):
        assert_rejected(
            store, SessionSegmentMissingError, message, command, RUN, argument, attempt_id="a-9"
        )


@pytest.mark.parametrize("entry", [None, ["e"], "entry"])
def test_an_entry_that_is_not_an_object_is_refused(store: WorkflowStore, entry: object) -> None:
    bound(store)
    assert_rejected(
        store,
        InvalidSessionEntryError,
        "Session entry must be a JSON object",
        store.append_session_entry,
        RUN,
        entry,
    )


@pytest.mark.parametrize("batch", [None, {"seq": 1}, [1, 2], "events"])
def test_a_batch_that_is_not_a_list_of_records_is_refused(
    store: WorkflowStore, batch: object
) -> None:
    bound(store)
    assert_rejected(
        store,
        InvalidSessionEventBatchError,
        "Session events must be a list of event records",
        store.append_session_events,
        RUN,
        batch,
    )


@pytest.mark.parametrize("attempt_id", ["", 5])
def test_a_bad_attempt_id_is_refused(store: WorkflowStore, attempt_id: object) -> None:
    create(store)
    assert_rejected(
        store,
        InvalidCaptureAttemptError,
        "Session capture attempt id must be a non-empty string or None",
        store.record_session_binding,
        RUN,
        BINDING,
        attempt_id=attempt_id,
    )


@pytest.mark.parametrize(("start", "limit"), [(-1, 10), (0, -1), ("0", 10), (0, True)])
def test_a_bad_page_is_refused(store: WorkflowStore, start: object, limit: object) -> None:
    bound(store)
    with pytest.raises(InvalidPageError):
        store.session_events(RUN, start=start, limit=limit)  # type: ignore[arg-type]
