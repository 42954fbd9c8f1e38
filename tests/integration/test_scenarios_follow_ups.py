"""Upstream §11 A (queueing), B (removing) and C (cascade cancellation), on every backend.

``readFollowUpQueue`` and the viewer deltas belong to projections that are not built yet; where
a scenario reads them, the same facts are asserted on the aggregates (``get_run``,
``get_follow_up``, ``get_workflow_message``) and in the event log.
"""

from __future__ import annotations

import pytest

from runledger.domain.errors import (
    CancelledFollowUpRemovalError,
    EmptyPromptError,
    FollowUpNotFoundError,
    FollowUpNotInRunError,
    FollowUpRemovalNotAllowedError,
    FollowUpRequestReusedError,
    InvalidRequestIdError,
    InvalidSourceError,
    NotOriginSessionError,
    PromptTooLargeError,
    RunAlreadyEndedError,
    RunMissingError,
    RunNotAcceptingChangesError,
    SentFollowUpRemovalError,
)
from runledger.domain.ids import follow_up_message_id
from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import assert_rejected, payload_fields, recording, writes_nothing
from tests.support.scenario import (
    CONTENT_SCHEMA,
    CONTROLLER,
    CR,
    HUMAN,
    IC,
    OTHER_SESSION,
    RUN,
    SESSION,
    SESSION_ACTOR,
    WT,
    create,
    deliver,
    events,
    follow_up_message,
    message,
    queue,
    queued_id,
    restart,
    running_run,
    waiting_run,
)
from tests.support.upstream_ids import resource_id_for

REQUEST_ID_ERROR = "Workflow request ID must be a stable identifier of at most 512 characters"
SOURCE_ERROR = "Workflow change source must be a non-empty string of at most 128 characters"
EMPTY_PROMPT_ERROR = "Workflow follow-up prompt must be a non-empty string"
PROMPT_SIZE_ERROR = "Workflow follow-up prompt cannot exceed 65536 bytes"
REUSED_ERROR = "Workflow follow-up request ID was reused with different content"
ORIGIN_ERROR = "Workflow follow-ups must target the run's origin Pi session"
REMOVAL_AUTHORITY_ERROR = "Workflow follow-up can be removed only by its source or a verified human"
REMOVED_REASON = "Removed before delivery"


def state_of(store: WorkflowStore, follow_up_id: str) -> str:
    follow_up = store.get_follow_up(follow_up_id)
    assert follow_up is not None
    return follow_up.state


# -- A. Queueing follow-ups -----------------------------------------------------------------


def test_a1_follow_ups_are_numbered_in_queue_order_and_not_adopted(store: WorkflowStore) -> None:
    running_run(store)

    first = queue(store, "follow-1", prompt="First task")
    second = queue(store, "follow-2", prompt="Second task")

    assert [first.follow_up.order, second.follow_up.order] == [1, 2]
    assert [first.adopted, second.adopted] == [False, False]


def test_a1_queued_follow_up_record_carries_the_request(store: WorkflowStore) -> None:
    running_run(store)

    queued = queue(store, "follow-1", prompt="First task").follow_up

    assert queued.model_dump(include={"run_id", "request_id", "target_session_id", "source"}) == {
        "run_id": RUN,
        "request_id": "follow-1",
        "target_session_id": SESSION,
        "source": WT,
    }
    assert (queued.actor.type, queued.actor.id) == ("session", SESSION)
    assert (queued.prompt, queued.state, queued.reason) == ("First task", "queued", None)
    assert store.get_follow_up(queued.follow_up_id) == queued


def test_a2_identical_repeat_is_adopted_and_writes_nothing(store: WorkflowStore) -> None:
    running_run(store)
    first = queue(store, "follow-1")

    with writes_nothing(store):
        again = queue(store, "follow-1")

    assert again.adopted is True
    assert again.follow_up == first.follow_up


def test_a2_repeat_by_an_actor_without_id_is_adopted(store: WorkflowStore) -> None:
    # Upstream compares a missing actor id as null: {type: human} equals {type: human, id: None}.
    running_run(store)
    first = queue(store, "follow-1", actor=Actor("human"), source=IC)

    again = queue(store, "follow-1", actor={"type": "human"}, source=IC)  # type: ignore[arg-type]

    assert again.adopted is True
    assert again.follow_up.follow_up_id == first.follow_up.follow_up_id


@pytest.mark.parametrize(
    "change",
    [
        pytest.param({"prompt": "Different task"}, id="prompt"),
        pytest.param({"source": IC}, id="source"),
        pytest.param({"actor": Actor("session", OTHER_SESSION)}, id="actor-id"),
        pytest.param({"actor": Actor("human", SESSION)}, id="actor-type"),
        pytest.param({"actor": Actor("session")}, id="actor-without-id"),
        pytest.param({"target_session_id": OTHER_SESSION}, id="target-session"),
    ],
)
def test_a2_request_id_reused_with_different_content_is_rejected(
    store: WorkflowStore, change: dict[str, object]
) -> None:
    running_run(store)
    queue(store, "follow-1", prompt="First task")

    assert_rejected(
        store, FollowUpRequestReusedError, REUSED_ERROR, queue, store, "follow-1", **change
    )


def test_a2_both_follow_ups_stay_queued_on_r_for_its_origin_session(
    store: WorkflowStore,
) -> None:
    # Upstream reads readFollowUpQueue(R); the queue projection is not built yet.
    running_run(store)
    ids = [queued_id(store, "follow-1"), queued_id(store, "follow-2", prompt="Second task")]
    queue(store, "follow-1")

    run = store.get_run(RUN)
    assert run is not None
    assert run.origin_session_id == SESSION
    assert [state_of(store, follow_up_id) for follow_up_id in ids] == ["queued", "queued"]
    accepted = events(store, "run.follow-up-accepted", run_id=RUN)
    assert [(e.payload["follow_up_id"], e.payload["order"]) for e in accepted] == [
        (ids[0], 1),
        (ids[1], 2),
    ]


def test_a3_follow_up_for_another_session_is_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(
        store,
        NotOriginSessionError,
        ORIGIN_ERROR,
        queue,
        store,
        "wrong-session",
        target_session_id=OTHER_SESSION,
        actor=Actor("session", OTHER_SESSION),
    )


def test_a4_completion_leaves_follow_ups_queued_with_pending_messages(
    store: WorkflowStore,
) -> None:
    running_run(store)
    ids = [queued_id(store, "follow-1"), queued_id(store, "follow-2", prompt="Second task")]

    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    assert [state_of(store, follow_up_id) for follow_up_id in ids] == ["queued", "queued"]
    assert [follow_up_message(store, i).status for i in ids] == ["pending", "pending"]


def test_a4_queue_after_completion_is_rejected_with_status_error(store: WorkflowStore) -> None:
    running_run(store)
    queue(store, "follow-1")
    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    assert_rejected(
        store,
        RunNotAcceptingChangesError,
        "Workflow run run-1 does not accept changes with status completed",
        queue,
        store,
        "late-follow-up",
        prompt="Too late",
    )


def test_a5_follow_up_messages_are_pending_in_queue_order(store: WorkflowStore) -> None:
    # Upstream lists WorkflowMessageStore.listRun(R); here: the run's message creations in
    # log order, each read back from its aggregate.
    running_run(store)
    ids = [queued_id(store, "follow-1"), queued_id(store, "follow-2", prompt="Second task")]

    created = [
        event.payload
        for event in events(store, "workflow-message.created", run_id=RUN)
        if event.payload["kind"] == "followUp"
    ]

    assert [
        (payload["source_id"], message(store, payload["workflow_message_id"]).status)
        for payload in created
    ] == [(ids[0], "pending"), (ids[1], "pending")]


def test_a5_branch_evidence_marks_the_first_follow_up_message_sent(store: WorkflowStore) -> None:
    running_run(store)
    first = follow_up_message_id(queued_id(store, "follow-1"))
    second = follow_up_message_id(queued_id(store, "follow-2", prompt="Second task"))

    with recording(store) as recorded:
        reported = store.report_branch(SESSION, [(first, "entry-1")], allowed_ids={first, second})

    assert [(m.workflow_message_id, m.status, m.pi_session_entry_id) for m in reported] == [
        (first, "sent", "entry-1")
    ]
    assert message(store, second).status == "pending"
    assert recorded.wire_names == ["workflow-message.sent"]
    expected = {
        "run_id": RUN,
        "workflow_message_id": first,
        "target_session_id": SESSION,
        "pi_session_entry_id": "entry-1",
    }
    assert payload_fields(recorded.events[0], expected) == expected


def test_a6_blank_prompt_is_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(store, EmptyPromptError, EMPTY_PROMPT_ERROR, queue, store, prompt=" ")


def test_a6_prompt_over_65536_bytes_is_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(store, PromptTooLargeError, PROMPT_SIZE_ERROR, queue, store, prompt="x" * 65537)


@pytest.mark.parametrize("prompt", [None, 42, b"First task"], ids=["none", "int", "bytes"])
def test_a6_prompt_of_the_wrong_type_gets_the_empty_prompt_message(
    store: WorkflowStore, prompt: object
) -> None:
    # DESIGN "Errors": a wrong type gets the upstream message of an empty value.
    running_run(store)

    assert_rejected(store, EmptyPromptError, EMPTY_PROMPT_ERROR, queue, store, prompt=prompt)


@pytest.mark.parametrize(
    "prompt", ["x" * 65536, "€" * 21845], ids=["65536-ascii-bytes", "65535-utf8-bytes"]
)
def test_a7_prompt_within_65536_utf8_bytes_is_accepted(store: WorkflowStore, prompt: str) -> None:
    running_run(store)

    queued = queue(store, prompt=prompt)

    assert queued.follow_up.prompt == prompt


def test_a7_limit_counts_utf8_bytes_not_characters(store: WorkflowStore) -> None:
    # 21846 "€" are 21846 characters but 65538 UTF-8 bytes (DESIGN decision 11).
    running_run(store)

    assert_rejected(store, PromptTooLargeError, PROMPT_SIZE_ERROR, queue, store, prompt="€" * 21846)


@pytest.mark.parametrize(
    "request_id",
    ["-x", "", "a" * 513, "a b", "abc\n", None],
    ids=["dash", "empty", "513", "space", "newline", "none"],
)
def test_a8_unstable_request_id_is_rejected(store: WorkflowStore, request_id: object) -> None:
    running_run(store)

    assert_rejected(
        store, InvalidRequestIdError, REQUEST_ID_ERROR, queue, store, request_id=request_id
    )


@pytest.mark.parametrize("request_id", ["a:b.c_d-1", "a" * 512], ids=["punctuation", "512"])
def test_a8_stable_request_id_is_accepted(store: WorkflowStore, request_id: str) -> None:
    running_run(store)

    assert queue(store, request_id=request_id).follow_up.request_id == request_id


@pytest.mark.parametrize(
    "source", ["", "   ", "s" * 129, None], ids=["empty", "blank", "129", "none"]
)
def test_a8_invalid_source_is_rejected(store: WorkflowStore, source: object) -> None:
    running_run(store)

    assert_rejected(store, InvalidSourceError, SOURCE_ERROR, queue, store, source=source)


def test_a8_source_of_128_characters_is_accepted(store: WorkflowStore) -> None:
    running_run(store)

    assert queue(store, source="s" * 128).follow_up.source == "s" * 128


def test_a8_request_id_is_checked_before_the_run_is_looked_up(store: WorkflowStore) -> None:
    assert_rejected(
        store,
        InvalidRequestIdError,
        REQUEST_ID_ERROR,
        queue,
        store,
        "-x",
        run_id="nope",
        source="",
        prompt=" ",
    )


def test_a8_source_is_checked_before_the_prompt(store: WorkflowStore) -> None:
    assert_rejected(
        store, InvalidSourceError, SOURCE_ERROR, queue, store, run_id="nope", source="", prompt=" "
    )


def test_a9_queue_on_a_missing_run_is_rejected(store: WorkflowStore) -> None:
    assert_rejected(
        store, RunMissingError, "Workflow run is missing: nope", queue, store, run_id="nope"
    )


def test_a9_queue_on_a_run_without_origin_session_is_rejected(store: WorkflowStore) -> None:
    create(store)

    assert_rejected(store, NotOriginSessionError, ORIGIN_ERROR, queue, store)


def test_a10_adoption_precedes_the_status_check_after_completion(store: WorkflowStore) -> None:
    running_run(store)
    first = queue(store, "follow-1")
    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    with writes_nothing(store):
        again = queue(store, "follow-1")

    assert (again.adopted, again.follow_up.state) == (True, "queued")
    assert again.follow_up.follow_up_id == first.follow_up.follow_up_id


def test_a10_adoption_returns_the_current_state_of_a_cancelled_follow_up(
    store: WorkflowStore,
) -> None:
    # Upstream appendix B.8: adoption ignores run status and reports whatever state it has now.
    running_run(store)
    queue(store, "follow-1")
    store.finish_run(RUN, status="failed", error="boom")

    again = queue(store, "follow-1")

    assert (again.adopted, again.follow_up.state, again.follow_up.reason) == (
        True,
        "cancelled",
        "boom",
    )


def test_a11_follow_up_and_message_ids_match_the_upstream_goldens(store: WorkflowStore) -> None:
    running_run(store, "run-1")

    follow_up_id = queued_id(store, "follow-1", run_id="run-1")

    assert follow_up_id == "follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27"
    assert resource_id_for("follow_up", follow_up_id) == (
        "follow_up-33576a74181a610d12ff70840ba80c181aec323f"
    )
    [queued] = events(store, "follow-up.queued", run_id="run-1")
    assert queued.payload["workflow_message_id"] == (
        "workflow-message-1de0d362a50efb25288e8a140cf87639d6e3ff7273b62c25a80642fcbb7c30e6"
    )


def test_a12_queue_writes_acceptance_follow_up_and_message_in_one_commit(
    store: WorkflowStore,
) -> None:
    running_run(store)

    with recording(store) as recorded:
        queue(store, "follow-1")

    assert recorded.wire_names == [
        "run.follow-up-accepted",
        "follow-up.queued",
        "workflow-message.created",
    ]


def test_a12_follow_up_queued_event_is_version_1_by_the_requesting_actor(
    store: WorkflowStore,
) -> None:
    running_run(store)

    follow_up_id = queued_id(store, "follow-1")

    [queued] = events(store, "follow-up.queued", run_id=RUN)
    assert (queued.version, queued.actor.type, queued.actor.id) == (1, "session", SESSION)
    expected = {
        "run_id": RUN,
        "follow_up_id": follow_up_id,
        "request_id": "follow-1",
        "order": 1,
        "target_session_id": SESSION,
        "source": WT,
        "prompt": "First task",
        "workflow_message_id": follow_up_message_id(follow_up_id),
    }
    assert payload_fields(queued, expected) == expected


def test_a12_follow_up_message_is_pending_with_upstream_content(store: WorkflowStore) -> None:
    # The session-wide order number is the outbox projection's (DESIGN decision 7), not built yet.
    running_run(store)

    follow_up_id = queued_id(store, "follow-1")

    created = follow_up_message(store, follow_up_id)
    assert (created.kind, created.source_id, created.target_session_id, created.status) == (
        "followUp",
        follow_up_id,
        SESSION,
        "pending",
    )
    assert created.content == {
        "schema": CONTENT_SCHEMA,
        "customType": "pi-workflows-follow-up",
        "content": "First task",
        "display": True,
        "details": {
            "workflowMessageId": created.workflow_message_id,
            "followUpId": follow_up_id,
            "runId": RUN,
            "kind": "followUp",
        },
        "triggerTurn": True,
    }


def test_a13_follow_up_is_accepted_while_the_run_is_waiting(store: WorkflowStore) -> None:
    waiting_run(store, "parent")

    queued = queue(
        store,
        "waiting-follow-up",
        run_id="parent",
        actor=Actor("human"),
        source=IC,
        prompt="Continue later",
    )

    assert (queued.adopted, queued.follow_up.order, queued.follow_up.state) == (False, 1, "queued")


def test_a13_follow_up_stays_on_the_parent_after_its_continuation_completes(
    store: WorkflowStore,
) -> None:
    # Settings (the other half of upstream A13) come later (DESIGN decision 4). The child has
    # no origin binding (DESIGN decision 10), where upstream's readFollowUpQueue(C) is undefined.
    waiting_run(store, "parent")
    follow_up_id = queued_id(
        store,
        "waiting-follow-up",
        run_id="parent",
        actor=Actor("human"),
        source=IC,
        prompt="Continue later",
    )
    create(store, "child", parent_run_id="parent")
    store.finish_run("child", status="completed", final_output={"reply": "done"})

    follow_up = store.get_follow_up(follow_up_id)
    assert follow_up is not None
    assert (follow_up.run_id, follow_up.prompt, follow_up.order, follow_up.state) == (
        "parent",
        "Continue later",
        1,
        "queued",
    )
    child = store.get_run("child")
    assert child is not None
    assert child.origin_session_id is None
    assert [e.wire_name for e in events(store, run_id="child")] == ["run.created", "run.finished"]


# -- B. Removing follow-ups -----------------------------------------------------------------


def test_b1_another_session_cannot_remove_a_follow_up(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)

    assert_rejected(
        store,
        FollowUpRemovalNotAllowedError,
        REMOVAL_AUTHORITY_ERROR,
        store.remove_follow_up,
        RUN,
        follow_up_id,
        actor=Actor("session", OTHER_SESSION),
        source=WT,
    )


def test_b2_verified_human_removes_a_controller_follow_up(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=CONTROLLER, source=CR, prompt="Remove me")

    removed = store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    assert (removed.state, removed.reason) == ("removed", REMOVED_REASON)
    assert store.get_follow_up(follow_up_id) == removed


def test_b2_removing_again_returns_the_removed_record_and_writes_nothing(
    store: WorkflowStore,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=CONTROLLER, source=CR, prompt="Remove me")
    removed = store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    with writes_nothing(store):
        again = store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    assert again == removed


def test_b2_removal_cancels_the_pending_message(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=CONTROLLER, source=CR, prompt="Remove me")

    with recording(store) as recorded:
        store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    assert recorded.wire_names == ["follow-up.removed", "workflow-message.cancelled"]
    assert follow_up_message(store, follow_up_id).status == "cancelled"


def test_b2_cancelling_the_run_leaves_a_removed_follow_up_removed(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=CONTROLLER, source=CR, prompt="Remove me")
    store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    store.finish_run(RUN, status="cancelled")

    assert state_of(store, follow_up_id) == "removed"
    assert follow_up_message(store, follow_up_id).status == "cancelled"
    assert events(store, "follow-up.cancelled") == []


def test_b3_follow_up_history_is_queued_then_removed_with_actors(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=CONTROLLER, source=CR, prompt="Remove me")
    store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    history = [
        event for event in events(store, run_id=RUN) if event.wire_name.startswith("follow-up.")
    ]

    assert [(e.version, e.wire_name, e.actor.type, e.actor.id) for e in history] == [
        (1, "follow-up.queued", "controller", "controller-1"),
        (2, "follow-up.removed", "human", "user-1"),
    ]
    expected = {"run_id": RUN, "follow_up_id": follow_up_id, "source": IC, "reason": REMOVED_REASON}
    assert payload_fields(history[1], expected) == expected


@pytest.mark.parametrize(
    ("queued_by", "queued_source", "remover", "remover_source"),
    [
        pytest.param(Actor("session", "s1"), WT, Actor("session", "s1"), WT, id="same-session"),
        pytest.param(Actor("session", "s1"), WT, Actor("human"), CR, id="human-without-id"),
        pytest.param(CONTROLLER, CR, CONTROLLER, CR, id="same-controller"),
        pytest.param(CONTROLLER, CR, Actor("human", "user-1"), IC, id="human-for-controller"),
    ],
)
def test_b4_source_or_human_may_remove(
    store: WorkflowStore,
    queued_by: Actor,
    queued_source: str,
    remover: Actor,
    remover_source: str,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=queued_by, source=queued_source)

    removed = store.remove_follow_up(RUN, follow_up_id, actor=remover, source=remover_source)

    assert removed.state == "removed"


@pytest.mark.parametrize(
    ("queued_by", "queued_source", "remover", "remover_source"),
    [
        pytest.param(Actor("session", "s1"), WT, Actor("session", "s1"), IC, id="other-source"),
        pytest.param(Actor("session", "s1"), WT, Actor("session"), WT, id="session-without-id"),
        pytest.param(Actor("session", "s1"), WT, Actor("host", "h"), WT, id="host"),
        pytest.param(Actor("session", "s1"), WT, Actor("system"), WT, id="system"),
        pytest.param(Actor("session", "s1"), WT, Actor("channel", "s1"), WT, id="channel"),
        pytest.param(CONTROLLER, CR, Actor("controller", "c2"), CR, id="other-controller"),
        pytest.param(Actor("host", "h"), WT, Actor("host", "h"), WT, id="host-as-own-source"),
    ],
)
def test_b4_anyone_else_may_not_remove(
    store: WorkflowStore,
    queued_by: Actor,
    queued_source: str,
    remover: Actor,
    remover_source: str,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=queued_by, source=queued_source)

    assert_rejected(
        store,
        FollowUpRemovalNotAllowedError,
        REMOVAL_AUTHORITY_ERROR,
        store.remove_follow_up,
        RUN,
        follow_up_id,
        actor=remover,
        source=remover_source,
    )


def test_b5_removing_an_unknown_follow_up_is_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(
        store,
        FollowUpNotFoundError,
        "Workflow follow-up not found: follow-up-x",
        store.remove_follow_up,
        RUN,
        "follow-up-x",
        actor=HUMAN,
        source=IC,
    )


def test_b5_removing_through_another_run_is_rejected(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)

    assert_rejected(
        store,
        FollowUpNotInRunError,
        "Workflow follow-up is not part of run other",
        store.remove_follow_up,
        "other",
        follow_up_id,
        actor=HUMAN,
        source=IC,
    )


def test_b5_removing_a_cancelled_follow_up_is_rejected(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    store.finish_run(RUN, status="failed", error="boom")

    assert_rejected(
        store,
        CancelledFollowUpRemovalError,
        "A cancelled workflow follow-up cannot be removed",
        store.remove_follow_up,
        RUN,
        follow_up_id,
        actor=HUMAN,
        source=IC,
    )


def test_b5_removing_a_sent_follow_up_is_rejected(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    deliver(store, follow_up_message_id(follow_up_id))

    assert_rejected(
        store,
        SentFollowUpRemovalError,
        "A sent workflow follow-up cannot be removed",
        store.remove_follow_up,
        RUN,
        follow_up_id,
        actor=SESSION_ACTOR,
        source=WT,
    )


def test_b5_cancelled_state_is_checked_before_removal_authority(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    store.finish_run(RUN, status="failed", error="boom")

    assert_rejected(
        store,
        CancelledFollowUpRemovalError,
        "A cancelled workflow follow-up cannot be removed",
        store.remove_follow_up,
        RUN,
        follow_up_id,
        actor=Actor("system"),
        source=WT,
    )


def test_b5_removal_authority_is_checked_before_delivery(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    deliver(store, follow_up_message_id(follow_up_id))

    assert_rejected(
        store,
        FollowUpRemovalNotAllowedError,
        REMOVAL_AUTHORITY_ERROR,
        store.remove_follow_up,
        RUN,
        follow_up_id,
        actor=Actor("session", OTHER_SESSION),
        source=WT,
    )


def test_b5_source_is_checked_before_the_follow_up_is_looked_up(store: WorkflowStore) -> None:
    assert_rejected(
        store,
        InvalidSourceError,
        SOURCE_ERROR,
        store.remove_follow_up,
        RUN,
        "follow-up-x",
        actor=HUMAN,
        source=" ",
    )


def test_b6_removed_follow_up_is_returned_unchanged_even_to_an_intruder(
    store: WorkflowStore,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    removed = store.remove_follow_up(RUN, follow_up_id, actor=SESSION_ACTOR, source=WT)

    with writes_nothing(store):
        again = store.remove_follow_up(
            RUN, follow_up_id, actor=Actor("session", "intruder"), source=WT
        )

    assert again == removed


def test_b7_human_removes_a_follow_up_after_the_run_completed(store: WorkflowStore) -> None:
    # DESIGN decision 6: removal checks neither run status nor origin session.
    running_run(store)
    follow_up_id = queued_id(store)
    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    removed = store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    assert (removed.state, removed.reason) == ("removed", REMOVED_REASON)


def test_b8_order_numbers_are_never_reused(store: WorkflowStore) -> None:
    running_run(store)
    first = queued_id(store, "a")
    store.remove_follow_up(RUN, first, actor=HUMAN, source=IC)

    second = queue(store, "b", prompt="Second task")

    assert second.follow_up.order == 2


# -- C. Cascade cancellation ----------------------------------------------------------------


def test_c1_cancelling_the_run_cancels_its_queued_follow_up(store: WorkflowStore) -> None:
    # Upstream reads readFollowUpQueue(R).followUps[0].state; the projection is not built yet.
    running_run(store)
    follow_up_id = queued_id(store)

    ended = store.finish_run(RUN, status="cancelled")

    assert ended.status == "cancelled"
    assert state_of(store, follow_up_id) == "cancelled"


def test_c2_failure_cancels_queued_follow_ups_with_the_error_as_reason(
    store: WorkflowStore,
) -> None:
    running_run(store)
    queued = [queued_id(store, "f1"), queued_id(store, "f2", prompt="Second task")]

    store.finish_run(RUN, status="failed", error="boom")

    follow_ups = [store.get_follow_up(follow_up_id) for follow_up_id in queued]
    assert [(f.state, f.reason) for f in follow_ups if f is not None] == [
        ("cancelled", "boom"),
        ("cancelled", "boom"),
    ]


def test_c2_failure_leaves_a_removed_follow_up_unchanged(store: WorkflowStore) -> None:
    running_run(store)
    removed_id = queued_id(store, "f3")
    removed = store.remove_follow_up(RUN, removed_id, actor=HUMAN, source=IC)

    store.finish_run(RUN, status="failed", error="boom")

    assert store.get_follow_up(removed_id) == removed


def test_c2_each_cancellation_is_a_system_event_naming_the_ended_run(
    store: WorkflowStore,
) -> None:
    running_run(store)
    queued = [queued_id(store, "f1"), queued_id(store, "f2", prompt="Second task")]
    removed_id = queued_id(store, "f3")
    store.remove_follow_up(RUN, removed_id, actor=HUMAN, source=IC)

    store.finish_run(RUN, status="failed", error="boom")

    cancelled = events(store, "follow-up.cancelled")
    assert sorted(e.payload["follow_up_id"] for e in cancelled) == sorted(queued)
    for event in cancelled:
        assert (event.version, event.actor.type, event.actor.id) == (2, "system", None)
        expected = {"run_id": RUN, "ended_run_id": RUN, "status": "failed", "reason": "boom"}
        assert payload_fields(event, expected) == expected


def test_c2_failure_cancels_the_pending_follow_up_messages(store: WorkflowStore) -> None:
    running_run(store)
    queued = [queued_id(store, "f1"), queued_id(store, "f2", prompt="Second task")]

    with recording(store) as recorded:
        store.finish_run(RUN, status="failed", error="boom")

    assert [follow_up_message(store, i).status for i in queued] == ["cancelled", "cancelled"]
    assert sorted(
        e.payload["workflow_message_id"] for e in recorded.named("workflow-message.cancelled")
    ) == sorted(follow_up_message_id(i) for i in queued)


def test_c2_decision_2_a_delivered_follow_up_is_not_cancelled_by_a_failure(
    store: WorkflowStore,
) -> None:
    # DESIGN decision 2 (upstream quirk §4.6 dropped): a sent follow-up stays queued.
    running_run(store)
    delivered = queued_id(store, "f1")
    deliver(store, follow_up_message_id(delivered))

    store.finish_run(RUN, status="failed", error="boom")

    assert state_of(store, delivered) == "queued"
    assert follow_up_message(store, delivered).status == "sent"
    assert events(store, "follow-up.cancelled") == []


def test_c3_timeout_without_error_gives_the_status_reason(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)

    store.finish_run(RUN, status="timed_out")

    follow_up = store.get_follow_up(follow_up_id)
    assert follow_up is not None
    assert (follow_up.state, follow_up.reason) == (
        "cancelled",
        "Workflow ended with status timed_out",
    )


def test_c4_completion_keeps_follow_ups_queued_without_cancellation_events(
    store: WorkflowStore,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store)

    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    assert state_of(store, follow_up_id) == "queued"
    assert follow_up_message(store, follow_up_id).status == "pending"
    assert events(store, "follow-up.cancelled") == []


def test_c4_waiting_keeps_follow_ups_queued_without_cancellation_events(
    store: WorkflowStore,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store)

    store.record_progress(RUN, status="waiting", waiting_on="approval")

    assert state_of(store, follow_up_id) == "queued"
    assert follow_up_message(store, follow_up_id).status == "pending"
    assert events(store, "follow-up.cancelled") == []


def test_c5_failed_continuation_cancels_its_own_and_its_parents_follow_ups(
    store: WorkflowStore,
) -> None:
    running_run(store, "parent")
    parent_follow_up = queued_id(store, "fp", run_id="parent")
    store.finish_run("parent", status="completed", final_output={"reply": "done"})
    running_run(store, "child", parent_run_id="parent")
    child_follow_up = queued_id(store, "fc", run_id="child")

    store.finish_run("child", status="failed", error="child failed")

    follow_ups = [store.get_follow_up(i) for i in (parent_follow_up, child_follow_up)]
    assert [(f.run_id, f.state, f.reason) for f in follow_ups if f is not None] == [
        ("parent", "cancelled", "child failed"),
        ("child", "cancelled", "child failed"),
    ]


def test_c5_every_cascaded_cancellation_names_the_continuation_that_ended(
    store: WorkflowStore,
) -> None:
    running_run(store, "parent")
    queued_id(store, "fp", run_id="parent")
    store.finish_run("parent", status="completed", final_output={"reply": "done"})
    running_run(store, "child", parent_run_id="parent")
    queued_id(store, "fc", run_id="child")

    store.finish_run("child", status="failed", error="child failed")

    cancelled = events(store, "follow-up.cancelled")
    assert sorted((e.payload["run_id"], e.payload["ended_run_id"]) for e in cancelled) == [
        ("child", "child"),
        ("parent", "child"),
    ]


def test_c6_decision_1_failed_restart_keeps_the_completed_parents_follow_ups(
    store: WorkflowStore,
) -> None:
    # DESIGN decision 1 (the later upstream behaviour, not 0.16.2's): the cancelling walk
    # follows continuation ancestors only, so a failed restart child leaves its parent alone.
    running_run(store, RUN)
    parent_follow_up = queued_id(store, "fp")
    store.finish_run(RUN, status="completed", final_output={"reply": "done"})
    child = restart(store, RUN).run_id
    store.record_progress(child, status="running", current_node="hold")

    store.finish_run(child, status="failed", error="restart failed")

    assert state_of(store, parent_follow_up) == "queued"
    assert follow_up_message(store, parent_follow_up).status == "pending"
    assert events(store, "follow-up.cancelled") == []


def test_c6_failed_restart_cancels_its_own_follow_ups(store: WorkflowStore) -> None:
    running_run(store, RUN)
    store.finish_run(RUN, status="completed", final_output={"reply": "done"})
    child = restart(store, RUN).run_id
    store.record_progress(child, status="running", current_node="hold")
    child_follow_up = queued_id(store, "fx", run_id=child)

    store.finish_run(child, status="failed", error="restart failed")

    [cancelled] = events(store, "follow-up.cancelled")
    assert cancelled.payload["follow_up_id"] == child_follow_up
    assert state_of(store, child_follow_up) == "cancelled"


def test_c7_interruption_fails_the_run_with_the_host_reason(store: WorkflowStore) -> None:
    running_run(store)

    interrupted = store.interrupt_run(RUN)

    assert (interrupted.status, interrupted.error) == (
        "failed",
        "Workflow host stopped before the run finished",
    )


def test_c7_interruption_cancels_queued_follow_ups_with_the_host_reason(
    store: WorkflowStore,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store)

    store.interrupt_run(RUN)

    follow_up = store.get_follow_up(follow_up_id)
    assert follow_up is not None
    assert (follow_up.state, follow_up.reason) == (
        "cancelled",
        "Workflow host stopped before the run finished",
    )


def test_c8_a_second_failure_of_a_failed_run_is_rejected_and_writes_nothing(
    store: WorkflowStore,
) -> None:
    # DESIGN decision 8: finishing an ended run is an error (upstream re-wrote the snapshot and
    # emitted nothing because no follow-up was still queued).
    running_run(store)
    queued_id(store)
    store.finish_run(RUN, status="failed", error="boom")

    assert_rejected(
        store,
        RunAlreadyEndedError,
        "Workflow run run-1 already ended with status failed",
        store.finish_run,
        RUN,
        status="failed",
        error="boom again",
    )


def test_c8_interrupting_a_failed_run_writes_nothing(store: WorkflowStore) -> None:
    # DESIGN decision 8: interrupt_run on a run that is not running is a no-op.
    running_run(store)
    queued_id(store)
    store.finish_run(RUN, status="failed", error="boom")

    with writes_nothing(store):
        still = store.interrupt_run(RUN)

    assert (still.status, still.error) == ("failed", "boom")
