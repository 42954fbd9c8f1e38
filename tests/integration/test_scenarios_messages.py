"""Upstream §11 D: workflow messages (the session outbox) and model turns, on every backend."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runledger.domain.errors import (
    BranchWrongSessionError,
    ConflictingEntryEvidenceError,
    InvalidMessageContentError,
    InvalidMessageKindError,
    InvalidTurnBehaviourError,
    MessageIdempotencyConflictError,
    MessageNotFoundError,
    OpenTurnExistsError,
    RunHasNoOriginSessionError,
    RunMissingError,
    TurnEndConflictError,
    TurnIdentityConflictError,
    TurnMessageMismatchError,
    TurnNotFoundError,
    TurnRequiresSentMessageError,
    UnknownBranchMessageError,
)
from runledger.domain.ids import follow_up_message_id, workflow_message_id_for
from runledger.domain.records import TurnRecord
from runledger.domain.workflow_messages import source_lookup_key
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import assert_rejected, payload_fields, recording, writes_nothing
from tests.support.outbox_commands import cancel_pending_for_source
from tests.support.scenario import (
    OTHER_SESSION,
    RUN,
    SESSION,
    create,
    deliver,
    events,
    message,
    notification_content,
    notify,
    queued_id,
    running_run,
    step,
    step_content,
    terminal_message_id_of,
)

NOTIFICATION_ID = workflow_message_id_for("notification", "notification-1", "1")


def sent_follow_up_message(store: WorkflowStore) -> str:
    """R with one follow-up whose message is already in session-1's branch."""
    running_run(store)
    message_id = follow_up_message_id(queued_id(store))
    deliver(store, message_id)
    return message_id


def sent_terminal_message(store: WorkflowStore) -> str:
    """R completed, its terminal message already in session-1's branch."""
    running_run(store)
    store.finish_run(RUN, status="completed", final_output={"reply": "done"})
    message_id = terminal_message_id_of(store)
    deliver(store, message_id)
    return message_id


def start(
    store: WorkflowStore, message_id: str, turn_id: str = "turn-1", run_id: str = RUN
) -> TurnRecord:
    return store.start_turn(
        message_id, run_id=run_id, target_session_id=SESSION, workflow_turn_id=turn_id
    )


# -- D1: create is idempotent; branch evidence is the only way to "sent" --------------------


def test_d1_notification_is_created_pending_for_the_origin_session(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")

    created = notify(store)

    assert created.workflow_message_id == NOTIFICATION_ID
    assert (created.run_id, created.target_session_id, created.kind, created.source_id) == (
        RUN,
        "session-a",
        "notification",
        "notification-1",
    )
    assert (created.status, created.pi_session_entry_id) == ("pending", None)
    assert created.content == notification_content("notification-1", "1")
    assert store.get_workflow_message(NOTIFICATION_ID) == created


def test_d1_creation_is_one_event_by_the_host(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")

    with recording(store) as recorded:
        notify(store)

    [created] = recorded.events
    assert (created.wire_name, created.version, created.actor.type) == (
        "workflow-message.created",
        1,
        "host",
    )
    expected = {
        "run_id": RUN,
        "workflow_message_id": NOTIFICATION_ID,
        "target_session_id": "session-a",
        "kind": "notification",
        "source_id": "notification-1",
        "content": notification_content("notification-1", "1"),
    }
    assert payload_fields(created, expected) == expected


def test_d1_creating_the_same_message_again_returns_an_equal_record_and_writes_nothing(
    store: WorkflowStore,
) -> None:
    running_run(store, session_id="session-a")
    first = notify(store)

    with writes_nothing(store):
        again = notify(store)

    assert again == first


def test_d1_branch_report_for_another_session_is_rejected(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")
    notify(store)

    assert_rejected(
        store,
        BranchWrongSessionError,
        "Workflow branch report targets the wrong origin session",
        store.report_branch,
        "session-b",
        [(NOTIFICATION_ID, "entry-wrong")],
        allowed_ids={NOTIFICATION_ID},
    )


def test_d1_branch_report_marks_the_message_sent(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")
    notify(store)

    [sent] = store.report_branch(
        "session-a", [(NOTIFICATION_ID, "entry-1")], allowed_ids={NOTIFICATION_ID}
    )

    assert (sent.status, sent.pi_session_entry_id) == ("sent", "entry-1")
    assert message(store, NOTIFICATION_ID) == sent


def test_d1_reporting_the_same_entry_again_writes_nothing(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")
    notify(store)
    [sent] = store.report_branch(
        "session-a", [(NOTIFICATION_ID, "entry-1")], allowed_ids={NOTIFICATION_ID}
    )

    with writes_nothing(store):
        [again] = store.report_branch(
            "session-a", [(NOTIFICATION_ID, "entry-1")], allowed_ids={NOTIFICATION_ID}
        )

    assert again == sent


def test_d1_conflicting_entry_evidence_is_rejected(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")
    notify(store)
    store.report_branch("session-a", [(NOTIFICATION_ID, "entry-1")], allowed_ids={NOTIFICATION_ID})

    assert_rejected(
        store,
        ConflictingEntryEvidenceError,
        "Workflow message has conflicting Pi session entry evidence",
        store.report_branch,
        "session-a",
        [(NOTIFICATION_ID, "entry-2")],
        allowed_ids={NOTIFICATION_ID},
    )


def test_d1_branch_report_of_a_message_not_allowed_is_rejected(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")
    notify(store)

    assert_rejected(
        store,
        UnknownBranchMessageError,
        f"Workflow branch report contains an unknown message: {NOTIFICATION_ID}",
        store.report_branch,
        "session-a",
        [(NOTIFICATION_ID, "entry-1")],
        allowed_ids=set(),
    )


def test_d1_branch_report_of_a_missing_message_is_rejected(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")

    assert_rejected(
        store,
        MessageNotFoundError,
        "Workflow message not found: workflow-message-x",
        store.report_branch,
        "session-a",
        [("workflow-message-x", "entry-1")],
        allowed_ids={"workflow-message-x"},
    )


def test_d1_a_rejected_branch_report_marks_none_of_its_entries_sent(store: WorkflowStore) -> None:
    running_run(store, session_id="session-a")
    notify(store)

    assert_rejected(
        store,
        UnknownBranchMessageError,
        "Workflow branch report contains an unknown message: workflow-message-x",
        store.report_branch,
        "session-a",
        [(NOTIFICATION_ID, "entry-1"), ("workflow-message-x", "entry-2")],
        allowed_ids={NOTIFICATION_ID},
    )
    assert message(store, NOTIFICATION_ID).status == "pending"


# -- D2: turns of a sent message --------------------------------------------------------------


@pytest.mark.parametrize(
    "sent_message", [sent_follow_up_message, sent_terminal_message], ids=["followUp", "terminal"]
)
def test_d2_turn_starts_on_a_sent_message(
    store: WorkflowStore, sent_message: Callable[[WorkflowStore], str]
) -> None:
    message_id = sent_message(store)

    with recording(store) as recorded:
        turn = start(store, message_id)

    assert (turn.workflow_turn_id, turn.workflow_message_id, turn.state) == (
        "turn-1",
        message_id,
        "started",
    )
    assert (turn.stop_reason, turn.ended_at) == (None, None)
    [started] = recorded.named("workflow-turn.started")
    expected = {"run_id": RUN, "workflow_turn_id": "turn-1", "workflow_message_id": message_id}
    assert payload_fields(started, expected) == expected


def test_d2_starting_the_same_turn_again_returns_an_equal_turn_and_writes_nothing(
    store: WorkflowStore,
) -> None:
    message_id = sent_follow_up_message(store)
    first = start(store, message_id)

    with writes_nothing(store):
        again = start(store, message_id)

    assert again == first


@pytest.mark.parametrize(
    "sent_message", [sent_follow_up_message, sent_terminal_message], ids=["followUp", "terminal"]
)
def test_d2_turn_ends_with_its_stop_reason_and_response(
    store: WorkflowStore, sent_message: Callable[[WorkflowStore], str]
) -> None:
    message_id = sent_message(store)
    start(store, message_id)

    ended = store.end_turn(
        "turn-1", stop_reason="completed", response_session_entry_id="assistant-1"
    )

    assert (ended.state, ended.stop_reason, ended.response_session_entry_id) == (
        "ended",
        "completed",
        "assistant-1",
    )
    assert ended.ended_at is not None
    assert store.get_turn("turn-1") == ended
    [ended_event] = events(store, "workflow-turn.ended")
    expected = {"workflow_turn_id": "turn-1", "stop_reason": "completed"}
    assert payload_fields(ended_event, expected) == expected


def test_d2_repeating_the_same_end_report_returns_the_saved_turn(store: WorkflowStore) -> None:
    message_id = sent_follow_up_message(store)
    start(store, message_id)
    ended = store.end_turn(
        "turn-1", stop_reason="completed", response_session_entry_id="assistant-1"
    )

    with writes_nothing(store):
        again = store.end_turn(
            "turn-1", stop_reason="completed", response_session_entry_id="assistant-1"
        )

    assert again == ended


@pytest.mark.parametrize(
    ("stop_reason", "response"),
    [("error", "assistant-1"), ("completed", "assistant-2"), ("completed", None)],
    ids=["other-stop-reason", "other-response", "no-response"],
)
def test_d2_a_different_end_report_conflicts_with_the_saved_result(
    store: WorkflowStore, stop_reason: str, response: str | None
) -> None:
    message_id = sent_follow_up_message(store)
    start(store, message_id)
    store.end_turn("turn-1", stop_reason="completed", response_session_entry_id="assistant-1")

    assert_rejected(
        store,
        TurnEndConflictError,
        "Workflow turn end report conflicts with its saved result",
        store.end_turn,
        "turn-1",
        stop_reason=stop_reason,
        response_session_entry_id=response,
    )


def test_d2_ending_an_unknown_turn_is_rejected(store: WorkflowStore) -> None:
    sent_follow_up_message(store)

    assert_rejected(
        store,
        TurnNotFoundError,
        "Workflow turn not found: turn-x",
        store.end_turn,
        "turn-x",
        stop_reason="completed",
    )


# -- D3: content validation and idempotency conflicts ----------------------------------------


def test_d3_step_that_does_not_trigger_a_turn_is_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(
        store,
        InvalidTurnBehaviourError,
        "Workflow message kind step has invalid turn behavior",
        store.create_workflow_message,
        RUN,
        kind="step",
        source_id="interaction-1",
        idempotency_key="initial",
        content=step_content("interaction-1", "initial", trigger_turn=False),
    )


def test_d3_notification_that_triggers_a_turn_is_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(
        store,
        InvalidTurnBehaviourError,
        "Workflow message kind notification has invalid turn behavior",
        store.create_workflow_message,
        RUN,
        kind="notification",
        source_id="notification-1",
        idempotency_key="1",
        content=notification_content("notification-1", "1", trigger_turn=True),
    )


@pytest.mark.parametrize(
    "broken",
    [
        pytest.param(lambda c: c.pop("details"), id="missing-details"),
        pytest.param(lambda c: c.update(schema="other"), id="wrong-schema"),
        pytest.param(lambda c: c.update(display="yes"), id="display-not-bool"),
        pytest.param(lambda c: c.update(content=None), id="content-not-text"),
        pytest.param(lambda c: c.pop("triggerTurn"), id="missing-trigger-turn"),
        pytest.param(lambda c: c.update(details=float("nan")), id="non-finite-details"),
    ],
)
def test_d3_malformed_content_is_rejected(
    store: WorkflowStore, broken: Callable[[dict[str, Any]], object]
) -> None:
    running_run(store)
    content = notification_content("notification-1", "1")
    broken(content)

    assert_rejected(
        store,
        InvalidMessageContentError,
        "Workflow message content is invalid",
        store.create_workflow_message,
        RUN,
        kind="notification",
        source_id="notification-1",
        idempotency_key="1",
        content=content,
    )


def test_d3_content_shape_is_checked_before_turn_behaviour(store: WorkflowStore) -> None:
    running_run(store)
    content = notification_content("notification-1", "1", trigger_turn=True)
    del content["details"]

    assert_rejected(
        store,
        InvalidMessageContentError,
        "Workflow message content is invalid",
        store.create_workflow_message,
        RUN,
        kind="notification",
        source_id="notification-1",
        idempotency_key="1",
        content=content,
    )


@pytest.mark.parametrize("kind", ["followUp", "terminal"])
def test_d3_follow_up_and_terminal_messages_cannot_be_created_directly(
    store: WorkflowStore, kind: str
) -> None:
    # DESIGN "Public API": follow-up and terminal messages come from their commands only,
    # so upstream's "kind followUp with triggerTurn false" cannot even be submitted.
    running_run(store)

    assert_rejected(
        store,
        InvalidMessageKindError,
        f"Workflow message kind {kind} cannot be created directly; "
        "use one of: step, decision, notification",
        store.create_workflow_message,
        RUN,
        kind=kind,
        source_id="source-1",
        idempotency_key="initial",
        content=step_content("source-1", "initial"),
    )


def test_d3_same_id_with_a_different_prompt_is_an_idempotency_conflict(
    store: WorkflowStore,
) -> None:
    running_run(store)
    first = step(store, "interaction-1", "initial")

    assert_rejected(
        store,
        MessageIdempotencyConflictError,
        f"Workflow message idempotency conflict: {first.workflow_message_id}",
        store.create_workflow_message,
        RUN,
        kind="step",
        source_id="interaction-1",
        idempotency_key="initial",
        content=step_content("interaction-1", "initial", prompt="A different prompt"),
    )


def test_d3_same_id_from_another_run_is_an_idempotency_conflict(store: WorkflowStore) -> None:
    running_run(store, "run-1")
    running_run(store, "run-2")
    first = notify(store, run_id="run-1")

    assert_rejected(
        store,
        MessageIdempotencyConflictError,
        f"Workflow message idempotency conflict: {first.workflow_message_id}",
        store.create_workflow_message,
        "run-2",
        kind="notification",
        source_id="notification-1",
        idempotency_key="1",
        content=notification_content("notification-1", "1", run_id="run-1"),
    )


def test_d3_message_for_a_run_without_origin_session_is_rejected(store: WorkflowStore) -> None:
    create(store)

    assert_rejected(
        store,
        RunHasNoOriginSessionError,
        "Workflow run run-1 has no origin Pi session",
        notify,
        store,
    )


def test_d3_message_for_a_missing_run_is_rejected(store: WorkflowStore) -> None:
    assert_rejected(
        store, RunMissingError, "Workflow run is missing: nope", notify, store, run_id="nope"
    )


# -- D4: one session-wide order across runs and kinds ---------------------------------------


def test_d4_messages_of_a_session_are_logged_in_creation_order_across_runs_and_kinds(
    store: WorkflowStore,
) -> None:
    # The order number itself is assigned by the session-outbox projection in log order
    # (DESIGN decision 7), which is not built yet: pin the log order it will number.
    running_run(store, "run-1")
    running_run(store, "run-2")
    running_run(store, "run-3", session_id=OTHER_SESSION)
    first = notify(store, run_id="run-1").workflow_message_id
    second = follow_up_message_id(queued_id(store, run_id="run-2"))
    other_session = notify(store, "notification-3", run_id="run-3").workflow_message_id
    third = step(store, run_id="run-1").workflow_message_id

    created = events(store, "workflow-message.created")

    by_session = {
        session: [
            e.payload["workflow_message_id"]
            for e in created
            if e.payload["target_session_id"] == session
        ]
        for session in (SESSION, OTHER_SESSION)
    }
    assert by_session == {SESSION: [first, second, third], OTHER_SESSION: [other_session]}


def test_d4_consistent_reads_leave_the_order_to_the_outbox(store: WorkflowStore) -> None:
    running_run(store)

    created = notify(store)

    assert created.order is None
    assert message(store, created.workflow_message_id).order is None


# -- D5: cancelling pending messages of a source --------------------------------------------
# DESIGN's public API does not list ``cancel_pending_for_source``, so the host's store does not
# offer it: these scenarios run it through the application behind the store (``runtime.app``).


def sent_and_pending_steps(store: WorkflowStore) -> tuple[str, str]:
    """Interaction "interaction-1": its initial step message sent, a reminder pending."""
    running_run(store)
    sent = step(store, "interaction-1", "initial").workflow_message_id
    deliver(store, sent)
    pending = step(store, "interaction-1", "reminder").workflow_message_id
    return sent, pending


def test_d5_cancel_pending_for_source_cancels_only_the_pending_message(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    sent, pending = sent_and_pending_steps(store)

    with recording(store) as recorded:
        count = cancel_pending_for_source(runtime.app, "interaction-1", kind="step")

    assert count == 1
    assert (message(store, sent).status, message(store, pending).status) == ("sent", "cancelled")
    assert recorded.wire_names == ["workflow-message.cancelled"]
    expected = {"run_id": RUN, "workflow_message_id": pending}
    assert payload_fields(recorded.events[0], expected) == expected


def test_d5_cancel_without_a_kind_cancels_every_pending_message_of_the_source(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    _, pending = sent_and_pending_steps(store)
    notify(store, "notification-1")

    count = cancel_pending_for_source(runtime.app, "interaction-1")

    assert count == 1
    assert message(store, pending).status == "cancelled"
    assert message(store, NOTIFICATION_ID).status == "pending"


def test_d5_cancel_for_another_kind_cancels_nothing(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    _, pending = sent_and_pending_steps(store)

    with writes_nothing(store):
        count = cancel_pending_for_source(runtime.app, "interaction-1", kind="followUp")

    assert count == 0
    assert message(store, pending).status == "pending"


def test_d5_cancelling_again_finds_nothing_pending(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    sent_and_pending_steps(store)
    cancel_pending_for_source(runtime.app, "interaction-1", kind="step")

    with writes_nothing(store):
        count = cancel_pending_for_source(runtime.app, "interaction-1", kind="step")

    assert count == 0


def test_d5_branch_evidence_turns_a_cancelled_message_sent(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    _, pending = sent_and_pending_steps(store)
    cancel_pending_for_source(runtime.app, "interaction-1", kind="step")

    sent = deliver(store, pending, "entry-2")

    assert (sent.status, sent.pi_session_entry_id) == ("sent", "entry-2")


# -- D6: turn preconditions -------------------------------------------------------------------


def test_d6_turn_of_a_pending_message_is_rejected(store: WorkflowStore) -> None:
    running_run(store)
    message_id = follow_up_message_id(queued_id(store))

    assert_rejected(
        store,
        TurnRequiresSentMessageError,
        "Workflow turn requires a sent message",
        start,
        store,
        message_id,
    )


def test_d6_turn_naming_another_run_is_rejected(store: WorkflowStore) -> None:
    message_id = sent_follow_up_message(store)
    running_run(store, "run-2")

    assert_rejected(
        store,
        TurnMessageMismatchError,
        "Workflow turn does not match its message",
        start,
        store,
        message_id,
        run_id="run-2",
    )


def test_d6_turn_naming_another_session_is_rejected(store: WorkflowStore) -> None:
    message_id = sent_follow_up_message(store)

    assert_rejected(
        store,
        TurnMessageMismatchError,
        "Workflow turn does not match its message",
        store.start_turn,
        message_id,
        run_id=RUN,
        target_session_id=OTHER_SESSION,
        workflow_turn_id="turn-1",
    )


def test_d6_turn_id_reused_for_another_message_is_an_identity_conflict(
    store: WorkflowStore,
) -> None:
    first = sent_follow_up_message(store)
    second = follow_up_message_id(queued_id(store, "follow-2", prompt="Second task"))
    deliver(store, second, "entry-2")
    start(store, first, "turn-1")

    assert_rejected(
        store,
        TurnIdentityConflictError,
        "Workflow turn identity conflict: turn-1",
        start,
        store,
        second,
        "turn-1",
    )


def test_d6_second_open_turn_on_one_message_is_rejected(store: WorkflowStore) -> None:
    # Upstream allows at most one started turn per message (§2.4).
    message_id = sent_follow_up_message(store)
    start(store, message_id, "turn-1")

    assert_rejected(
        store,
        OpenTurnExistsError,
        f"Workflow message {message_id} already has an open turn: turn-1",
        start,
        store,
        message_id,
        "turn-2",
    )


def test_d6_turn_of_a_missing_message_is_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(
        store,
        MessageNotFoundError,
        "Workflow message not found: workflow-message-x",
        start,
        store,
        "workflow-message-x",
    )


def test_d5_a_source_id_too_long_for_an_index_is_found_by_its_digest(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    # A quarter-megabyte id: PostgreSQL's btree refused it as the log's lookup key (hypothesis
    # found the OperationalError); the log indexes its SHA-256 instead, on every backend.
    running_run(store)
    long_source = "interaction-" + "a" * 262_145
    first = step(store, long_source, "initial").workflow_message_id
    second = step(store, long_source, "reminder").workflow_message_id
    # Another source whose id is the long one's digest key: never taken for it.
    other = step(store, source_lookup_key(long_source), "initial").workflow_message_id

    count = cancel_pending_for_source(runtime.app, long_source, kind="step")

    assert count == 2
    assert [message(store, m).status for m in (first, second, other)] == [
        "cancelled",
        "cancelled",
        "pending",
    ]
