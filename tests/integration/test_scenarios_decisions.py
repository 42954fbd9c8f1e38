"""Human decisions on every backend (upstream §9.3, §3.7; DESIGN decisions 15, 20, 25, 26).

A decision is requested at a waiting run's node attempt, answered (first writer wins),
timed out or cancelled, and an accepted one continues the run in a child that carries the
receipt. Times come from the store's injected clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runledger.domain.canonical import json_digest
from runledger.domain.errors import (
    DecisionAlreadyAcceptedError,
    DecisionContinuationConflictError,
    DecisionExpiredError,
    DecisionNotAcceptedError,
    DecisionNotFoundError,
    DecisionRequestConflictError,
    DecisionResponseNotAChoiceError,
    DecisionRunMissingError,
    DecisionTimeoutNotEligibleError,
    InvalidArgumentTypeError,
    RunAlreadyExistsError,
)
from runledger.domain.ids import continuation_run_id_for, decision_id_for
from runledger.domain.records import DecisionSubmission, HumanDecisionRecord, RunRecord
from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.assertions import (
    assert_rejected,
    bare_errors,
    payload_fields,
    recording,
    whole_log,
    writes_nothing,
)
from tests.support.clock import FakeClock
from tests.support.scenario import RUN, SESSION, create, running_run
from tests.support.workers import Op, run_race

ALICE = Actor("human", "alice")
BOB = Actor("human", "bob")
REQUEST: dict[str, Any] = {
    "title": "Ship the release?",
    "choices": ["ship", "hold"],
    "expiresAt": "2026-01-01T01:00:00+00:00",
}
WITH_DEFAULT = {**REQUEST, "defaultResponse": {"choice": "hold"}}
REQUEST_NO_DEADLINE = {"title": "Ship the release?", "choices": ["ship", "hold"]}
SHIP = {"choice": "ship"}
HOLD = {"choice": "hold"}
DECISION = decision_id_for(RUN, "approve", "attempt-1")
CHILD = continuation_run_id_for(DECISION)
PAST_DEADLINE = timedelta(hours=2)
WRONG = [None, 42, 4.5, b"bytes", ["list"], {"a": 1}, object(), "\ud800"]


def waiting(store: WorkflowStore, run_id: str = RUN, **kwargs: Any) -> RunRecord:
    """R parked at the checkpoint "approve", bound to its origin session."""
    running_run(store, run_id, **kwargs)
    return store.record_progress(run_id, status="waiting", current_attempt_id="attempt-1")


def requested(
    store: WorkflowStore, request: dict[str, Any] | None = None, *, attempt_id: str = "attempt-1"
) -> HumanDecisionRecord:
    return store.request_human_decision(
        RUN, node_id="approve", attempt_id=attempt_id, request=request or REQUEST
    )


def answer(
    store: WorkflowStore,
    response: dict[str, Any] = SHIP,
    submission_id: str = "submission-1",
    *,
    actor: Actor = ALICE,
    decision_id: str = DECISION,
    continue_run: bool = False,
) -> DecisionSubmission:
    return store.answer_human_decision(
        decision_id,
        actor=actor,
        response=response,
        submission_id=submission_id,
        continue_run=continue_run,
    )


def accepted(store: WorkflowStore) -> HumanDecisionRecord:
    """R waits on an accepted decision answered "ship" by alice."""
    waiting(store)
    requested(store)
    return answer(store).decision


def expired(
    store: WorkflowStore, clock: FakeClock, request: dict[str, Any] | None = None
) -> HumanDecisionRecord:
    """R waits on a decision still pending when its deadline has passed."""
    waiting(store)
    decision = requested(store, request)
    clock.advance(PAST_DEADLINE)
    return decision


def decision_of(store: WorkflowStore, decision_id: str = DECISION) -> HumanDecisionRecord:
    found = store.get_human_decision(decision_id)
    assert found is not None, decision_id
    return found


# -- requests -------------------------------------------------------------------------------


def test_a_request_opens_a_pending_decision_of_the_node_attempt(
    store: WorkflowStore, clock: FakeClock
) -> None:
    waiting(store)
    with recording(store) as recorded:
        decision = requested(store)

    [event] = recorded.events
    assert (event.wire_name, event.version, event.actor.type) == ("decision.requested", 1, "host")
    expected = {
        "run_id": RUN,
        "decision_id": DECISION,
        "node_id": "approve",
        "attempt_id": "attempt-1",
        "request": REQUEST,
        "request_digest": json_digest(REQUEST),
    }
    assert payload_fields(event, expected) == expected
    assert (decision.decision_id, decision.status, decision.adopted) == (DECISION, "pending", False)
    assert decision.expires_at is not None
    assert decision.expires_at.isoformat() == REQUEST["expiresAt"]
    assert decision.created_at == event.recorded_at
    assert decision.created_at < clock.current
    assert store.get_human_decision(DECISION) == decision


def test_the_same_request_again_is_adopted_and_writes_nothing(store: WorkflowStore) -> None:
    waiting(store)
    first = requested(store)
    with writes_nothing(store):
        again = requested(store, dict(reversed(list(REQUEST.items()))))
    assert again.adopted is True
    assert again.model_dump() == {**first.model_dump(), "adopted": True}


def test_another_request_for_the_same_attempt_conflicts(store: WorkflowStore) -> None:
    waiting(store)
    requested(store)
    assert_rejected(
        store,
        DecisionRequestConflictError,
        "Immutable human decision request conflicts",
        requested,
        store,
        {**REQUEST, "title": "Ship it now?"},
    )


def test_another_attempt_of_the_node_gets_its_own_decision(store: WorkflowStore) -> None:
    waiting(store)
    first = requested(store)
    second = requested(store, {**REQUEST, "title": "Again?"}, attempt_id="attempt-2")
    assert second.decision_id == decision_id_for(RUN, "approve", "attempt-2")
    assert second.decision_id != first.decision_id


def test_a_request_for_a_missing_run_is_refused(store: WorkflowStore) -> None:
    assert_rejected(
        store,
        DecisionRunMissingError,
        "Human decision run is missing: run-1",
        requested,
        store,
    )


def test_an_unknown_decision_reads_as_none(store: WorkflowStore) -> None:
    assert store.get_human_decision("decision-unknown") is None
    assert store.get_human_decision("not-even-a-decision-id") is None


def test_a_decision_id_that_is_not_text_is_refused_by_name(store: WorkflowStore) -> None:
    with pytest.raises(InvalidArgumentTypeError, match="decision_id must be text, not int"):
        store.get_human_decision(7)  # type: ignore[arg-type]


def test_commands_on_an_unknown_decision_are_refused(store: WorkflowStore) -> None:
    message = "Human decision not found: decision-unknown"
    for command in (
        lambda: answer(store, decision_id="decision-unknown"),
        lambda: store.apply_decision_timeout("decision-unknown"),
        lambda: store.cancel_human_decision("decision-unknown"),
        lambda: store.continue_after_decision("decision-unknown"),
    ):
        assert_rejected(store, DecisionNotFoundError, message, command)


# -- answers: the submission outcomes --------------------------------------------------------


def test_the_first_answer_wins_and_is_accepted_as_human(
    store: WorkflowStore, clock: FakeClock
) -> None:
    waiting(store)
    requested(store)
    with recording(store) as recorded:
        submission = answer(store)

    assert recorded.wire_names == ["decision.answer-submitted", "decision.accepted"]
    assert all(event.actor == recorded.events[0].actor for event in recorded.events)
    assert (recorded.events[0].actor.type, recorded.events[0].actor.id) == ("human", "alice")
    assert (submission.outcome, submission.submission_id) == ("won", "submission-1")
    decision = submission.decision
    assert (decision.status, decision.provenance, decision.response) == ("accepted", "human", SHIP)
    assert decision.answer_digest == json_digest(SHIP)
    assert decision.resolved_at == recorded.events[1].recorded_at
    assert decision.revision == recorded.events[1].version == 3
    assert decision_of(store) == decision


def test_the_winning_submission_repeated_is_adopted_and_writes_nothing(
    store: WorkflowStore,
) -> None:
    accepted(store)
    with writes_nothing(store):
        again = answer(store)
    assert again.outcome == "adopted"


def test_another_submission_of_the_same_answer_finds_it_already_resolved(
    store: WorkflowStore,
) -> None:
    accepted(store)
    with recording(store) as recorded:
        submission = answer(store, SHIP, "submission-2", actor=BOB)
    assert submission.outcome == "already_resolved"
    [event] = recorded.events
    expected = {"submission_id": "submission-2", "outcome": "already_resolved"}
    assert (event.wire_name, payload_fields(event, expected)) == (
        "decision.answer-submitted",
        expected,
    )
    assert submission.decision.response == SHIP


def test_a_different_answer_after_acceptance_conflicts_and_the_first_stands(
    store: WorkflowStore,
) -> None:
    accepted(store)
    submission = answer(store, HOLD, "submission-2", actor=BOB)
    assert submission.outcome == "conflict"
    decision = decision_of(store)
    assert (decision.response, decision.provenance) == (SHIP, "human")
    assert [(s.submission_id, s.outcome, s.actor.id) for s in decision.submissions] == [
        ("submission-1", "won", "alice"),
        ("submission-2", "conflict", "bob"),
    ]


def test_an_answer_that_is_not_one_of_the_choices_is_refused(store: WorkflowStore) -> None:
    waiting(store)
    requested(store)
    assert_rejected(
        store,
        DecisionResponseNotAChoiceError,
        "Human decision response is not one of the choices",
        answer,
        store,
        {"choice": "maybe"},
    )
    assert decision_of(store).status == "pending"


def test_an_answer_after_the_deadline_is_refused(store: WorkflowStore, clock: FakeClock) -> None:
    expired(store, clock)
    assert_rejected(
        store,
        DecisionExpiredError,
        "Human decision request expired before the answer was accepted",
        answer,
        store,
    )


# -- deadline and timeout policy --------------------------------------------------------------


def test_the_timeout_before_the_deadline_is_not_eligible(store: WorkflowStore) -> None:
    waiting(store)
    requested(store, WITH_DEFAULT)
    assert_rejected(
        store,
        DecisionTimeoutNotEligibleError,
        "Human decision timeout default is not eligible yet",
        store.apply_decision_timeout,
        DECISION,
    )


def test_the_timeout_after_the_deadline_accepts_the_default_by_policy(
    store: WorkflowStore, clock: FakeClock
) -> None:
    expired(store, clock, WITH_DEFAULT)
    with recording(store) as recorded:
        decision = store.apply_decision_timeout(DECISION)

    [event] = recorded.events
    assert (event.wire_name, event.actor.type) == ("decision.accepted", "policy")
    assert payload_fields(event, {"provenance": "timeout_policy"}) == {
        "provenance": "timeout_policy"
    }
    assert (decision.status, decision.provenance, decision.response) == (
        "accepted",
        "timeout_policy",
        HOLD,
    )


def test_the_timeout_after_the_deadline_without_a_default_cancels_it(
    store: WorkflowStore, clock: FakeClock
) -> None:
    expired(store, clock)
    with recording(store) as recorded:
        decision = store.apply_decision_timeout(DECISION)

    assert recorded.wire_names == ["decision.cancelled"]
    assert recorded.events[0].actor.type == "policy"
    assert (decision.status, decision.provenance) == ("cancelled", "expired_no_default")


def test_the_timeout_of_a_resolved_decision_writes_nothing(
    store: WorkflowStore, clock: FakeClock
) -> None:
    accepted(store)
    clock.advance(PAST_DEADLINE)
    with writes_nothing(store):
        decision = store.apply_decision_timeout(DECISION)
    assert decision.provenance == "human"


# -- cancellation -----------------------------------------------------------------------------


def test_an_explicit_cancel_records_its_provenance(store: WorkflowStore) -> None:
    waiting(store)
    requested(store)
    with recording(store) as recorded:
        decision = store.cancel_human_decision(DECISION, provenance="explicit_cancel")
    [event] = recorded.events
    assert (event.wire_name, event.actor.type, event.payload["provenance"]) == (
        "decision.cancelled",
        "control",
        "explicit_cancel",
    )
    assert (decision.status, decision.provenance) == ("cancelled", "explicit_cancel")


def test_an_answer_to_a_cancelled_decision_finds_it_already_resolved(
    store: WorkflowStore,
) -> None:
    waiting(store)
    requested(store)
    store.cancel_human_decision(DECISION)
    assert answer(store).outcome == "already_resolved"
    assert decision_of(store).status == "cancelled"


def test_an_accepted_decision_cannot_be_cancelled(store: WorkflowStore) -> None:
    accepted(store)
    assert_rejected(
        store,
        DecisionAlreadyAcceptedError,
        f"Human decision is already accepted: {DECISION}",
        store.cancel_human_decision,
        DECISION,
    )


# -- the continuation -------------------------------------------------------------------------


def test_continuing_creates_the_child_with_the_receipt(store: WorkflowStore) -> None:
    create(store, "root")
    waiting(store, parent_run_id="root")
    requested(store)
    won = answer(store).decision
    with recording(store) as recorded:
        child = store.continue_after_decision(DECISION)

    assert recorded.wire_names == [
        "decision.continuation-created",
        "run.created",
        "run.session-bound",
    ]
    assert child.run_id == CHILD == "continuation-" + DECISION.removeprefix("decision-")
    assert (child.parent_run_id, child.root_run_id, child.lineage_kind) == (
        RUN,
        "root",
        "continuation",
    )
    assert (child.status, child.restart_number, child.origin_session_id) == ("queued", 0, SESSION)
    assert won.resolved_at is not None
    assert child.human_decision == {
        "schema": "pi-workflows.human-decision-receipt.v1",
        "decisionId": DECISION,
        "requestDigest": json_digest(REQUEST),
        "nodeId": "approve",
        "response": SHIP,
        "provenance": "human",
        "acceptedAt": won.resolved_at.isoformat(),
        "answerDigest": json_digest(SHIP),
        "subjectDigest": json_digest({"attemptId": "attempt-1", "nodeId": "approve", "runId": RUN}),
        "presentationDigest": json_digest(REQUEST),
        "revision": 3,
    }
    assert store.get_run(CHILD) == child
    assert decision_of(store).continuation_run_id == CHILD


def test_the_continuation_child_inherits_the_parents_workflow_and_input(
    store: WorkflowStore,
) -> None:
    accepted(store)
    child = store.continue_after_decision(DECISION)
    parent = store.get_run(RUN)
    assert parent is not None
    assert (child.workflow_name, child.workflow_ref, child.input) == (
        parent.workflow_name,
        parent.workflow_ref,
        parent.input,
    )


def test_continuing_again_returns_the_same_child_and_writes_nothing(
    store: WorkflowStore,
) -> None:
    accepted(store)
    first = store.continue_after_decision(DECISION)
    with writes_nothing(store):
        again = store.continue_after_decision(DECISION)
    assert again == first


def test_a_continuation_after_the_timeout_policy_says_timeout(
    store: WorkflowStore, clock: FakeClock
) -> None:
    expired(store, clock, WITH_DEFAULT)
    store.apply_decision_timeout(DECISION)
    child = store.continue_after_decision(DECISION)
    assert child.human_decision is not None
    assert (child.human_decision["provenance"], child.human_decision["response"]) == (
        "timeout",
        HOLD,
    )


@pytest.mark.parametrize("cancel", [False, True], ids=["pending", "cancelled"])
def test_a_decision_that_is_not_accepted_cannot_continue(
    store: WorkflowStore, cancel: bool
) -> None:
    waiting(store)
    requested(store)
    if cancel:
        store.cancel_human_decision(DECISION)
    assert_rejected(
        store,
        DecisionNotAcceptedError,
        f"Human decision is not accepted: {DECISION}",
        store.continue_after_decision,
        DECISION,
    )


def test_a_named_continuation_is_kept_and_another_name_conflicts(store: WorkflowStore) -> None:
    accepted(store)
    named = store.continue_after_decision(DECISION, run_id="run-1-approved")
    assert named.run_id == "run-1-approved"
    assert store.continue_after_decision(DECISION, run_id="run-1-approved") == named
    assert_rejected(
        store,
        DecisionContinuationConflictError,
        "Immutable human decision continuation conflicts",
        store.continue_after_decision,
        DECISION,
    )


def test_a_continuation_whose_id_is_taken_by_another_run_is_refused(
    store: WorkflowStore,
) -> None:
    accepted(store)
    create(store, CHILD)
    assert_rejected(
        store,
        RunAlreadyExistsError,
        f"Workflow run already exists: {CHILD}",
        store.continue_after_decision,
        DECISION,
    )


def test_an_answer_asked_to_continue_commits_acceptance_and_child_together(
    store: WorkflowStore,
) -> None:
    waiting(store)
    requested(store)
    with recording(store) as recorded:
        submission = answer(store, continue_run=True)

    assert recorded.wire_names == [
        "decision.answer-submitted",
        "decision.accepted",
        "decision.continuation-created",
        "run.created",
        "run.session-bound",
    ]
    positions = [event.position for event in recorded.events]
    assert positions == list(range(positions[0], positions[0] + 5))
    assert submission.continuation is not None
    assert submission.continuation == store.get_run(CHILD)
    assert submission.decision.continuation_run_id == CHILD


def test_an_answer_whose_continuation_fails_is_not_accepted_either(
    store: WorkflowStore,
) -> None:
    waiting(store)
    requested(store)
    create(store, CHILD)
    assert_rejected(
        store,
        RunAlreadyExistsError,
        f"Workflow run already exists: {CHILD}",
        answer,
        store,
        continue_run=True,
    )
    assert decision_of(store).status == "pending"


def test_a_retried_winning_answer_asked_to_continue_continues_once(
    store: WorkflowStore,
) -> None:
    accepted(store)
    first = answer(store, continue_run=True)
    with writes_nothing(store):
        again = answer(store, continue_run=True)
    assert (first.outcome, again.outcome) == ("adopted", "adopted")
    assert first.continuation == again.continuation == store.get_run(CHILD)


def test_a_conflicting_answer_asked_to_continue_does_not_continue(store: WorkflowStore) -> None:
    accepted(store)
    submission = answer(store, HOLD, "submission-2", continue_run=True)
    assert (submission.outcome, submission.continuation) == ("conflict", None)
    assert store.get_run(CHILD) is None


def test_the_timeout_asked_to_continue_commits_acceptance_and_child_together(
    store: WorkflowStore, clock: FakeClock
) -> None:
    expired(store, clock, WITH_DEFAULT)
    with recording(store) as recorded:
        decision = store.apply_decision_timeout(DECISION, continue_run=True)
    assert recorded.wire_names == [
        "decision.accepted",
        "decision.continuation-created",
        "run.created",
        "run.session-bound",
    ]
    assert decision.continuation_run_id == CHILD


def test_an_ordinary_run_carries_no_receipt(store: WorkflowStore) -> None:
    assert waiting(store).human_decision is None


# -- times and durability --------------------------------------------------------------------


def test_decision_times_come_from_the_injected_clock(store_url: str) -> None:
    clock = FakeClock(step=timedelta(0))
    with open_store(store_url, clock=clock) as store:
        waiting(store)
        opened = requested(store)
        clock.advance(timedelta(minutes=5))
        won = answer(store).decision
    assert opened.created_at == clock.current - timedelta(minutes=5)
    assert won.resolved_at == won.updated_at == clock.current


def test_a_decision_reads_back_the_same_from_another_store(durable_url: str) -> None:
    store_url = durable_url
    with open_store(store_url, clock=FakeClock()) as first:
        waiting(first)
        requested(first)
        answer(first, continue_run=True)
        answer(first, HOLD, "submission-2")
        decision = decision_of(first)
        child = first.get_run(CHILD)
    with open_store(store_url, clock=FakeClock()) as second:
        assert decision_of(second) == decision
        assert second.get_run(CHILD) == child


# -- wrong types: a WorkflowError, and nothing written ----------------------------------------


def calls_with(value: Any) -> list[tuple[str, Callable[[WorkflowStore], object]]]:
    return [
        (
            "request run",
            lambda s: s.request_human_decision(value, node_id="n", attempt_id="a", request=REQUEST),
        ),
        (
            "request node",
            lambda s: s.request_human_decision(RUN, node_id=value, attempt_id="a", request=REQUEST),
        ),
        (
            "request attempt",
            lambda s: s.request_human_decision(RUN, node_id="n", attempt_id=value, request=REQUEST),
        ),
        (
            "request body",
            lambda s: s.request_human_decision(RUN, node_id="n", attempt_id="a", request=value),
        ),
        (
            "request title",
            lambda s: s.request_human_decision(
                RUN, node_id="n", attempt_id="a", request={"title": value}
            ),
        ),
        (
            "request choices",
            lambda s: s.request_human_decision(
                RUN, node_id="n", attempt_id="a", request={"title": "t", "choices": [value]}
            ),
        ),
        (
            "request deadline",
            lambda s: s.request_human_decision(
                RUN, node_id="n", attempt_id="a", request={"title": "t", "expiresAt": value}
            ),
        ),
        ("answer decision", lambda s: answer(s, decision_id=value)),
        ("answer actor", lambda s: answer(s, actor=value)),
        ("answer response", lambda s: answer(s, value)),
        ("answer choice", lambda s: answer(s, {"choice": value})),
        ("answer submission", lambda s: answer(s, SHIP, value)),
        ("answer continue", lambda s: answer(s, continue_run=value)),
        ("timeout decision", lambda s: s.apply_decision_timeout(value)),
        ("timeout continue", lambda s: s.apply_decision_timeout(DECISION, continue_run=value)),
        ("cancel decision", lambda s: s.cancel_human_decision(value)),
        ("cancel provenance", lambda s: s.cancel_human_decision(DECISION, provenance=value)),
        ("continue decision", lambda s: s.continue_after_decision(value)),
        ("continue run id", lambda s: s.continue_after_decision(DECISION, run_id=value)),
    ]


@pytest.mark.parametrize("value", WRONG, ids=lambda value: type(value).__name__)
def test_every_decision_argument_of_a_wrong_type_is_a_workflow_error_writing_nothing(
    store: WorkflowStore, value: Any
) -> None:
    waiting(store)
    requested(store)
    before = whole_log(store)
    bare = bare_errors(store, calls_with(value))
    assert not bare, "\n".join(bare)
    assert [e.wire_name for e in whole_log(store)[len(before) :]] == []
    assert decision_of(store).status == "pending"


# -- two processes answer at once ---------------------------------------------------------


RACE_ROUNDS = 6


def answer_op(decision_id: str, worker: int, response: dict[str, Any]) -> Op:
    return {
        "op": "answer",
        "decision_id": decision_id,
        "actor": {"type": "human", "id": f"human-{worker}"},
        "response": response,
        "submission_id": f"{decision_id}-worker-{worker}",
    }


def test_two_processes_answering_differently_at_once_give_one_winner_and_one_conflict(
    durable_url: str,
) -> None:
    with open_store(durable_url) as store:
        running_run(store)
        decisions = [
            store.request_human_decision(
                RUN, node_id="approve", attempt_id=f"attempt-{n}", request={**REQUEST_NO_DEADLINE}
            ).decision_id
            for n in range(RACE_ROUNDS)
        ]
        rounds = [
            [[answer_op(decision_id, 0, SHIP)], [answer_op(decision_id, 1, HOLD)]]
            for decision_id in decisions
        ]

        race = run_race(durable_url, rounds)

        assert race.rounds_run >= 1
        overlapped = [
            max(o.started for o in race.round(n)) < min(o.ended for o in race.round(n))
            for n in range(race.rounds_run)
        ]
        assert any(overlapped), "the two processes never answered at the same time"
        log = whole_log(store)
        for number in range(race.rounds_run):
            outcomes = race.round(number)
            failed = [o.describe() for o in outcomes if not o.ok]
            assert not failed, "\n".join(failed)
            by_outcome = {o.result["outcome"]: o for o in outcomes if o.result is not None}
            assert sorted(by_outcome) == ["conflict", "won"], [o.describe() for o in outcomes]
            decision = decision_of(store, decisions[number])
            assert decision.response == by_outcome["won"].op["response"]
            accepted_events = [
                e
                for e in log
                if e.wire_name == "decision.accepted"
                and e.payload["decision_id"] == decisions[number]
            ]
            assert len(accepted_events) == 1
            assert sorted(s.outcome for s in decision.submissions) == ["conflict", "won"]
