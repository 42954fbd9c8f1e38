"""Rules of the HumanDecision aggregate (upstream §9.3, §3.7; DESIGN decisions 15, 20, 26)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runledger.domain.canonical import json_digest
from runledger.domain.errors import (
    DecisionAlreadyAcceptedError,
    DecisionContinuationConflictError,
    DecisionExpiredError,
    DecisionHasTimeoutDefaultError,
    DecisionNotAcceptedError,
    DecisionRequestConflictError,
    DecisionResponseNotAChoiceError,
    DecisionTimeoutNotEligibleError,
    InvalidCancellationProvenanceError,
    InvalidDecisionFieldError,
    InvalidDecisionFlagError,
    InvalidDecisionJsonError,
    InvalidDecisionResponseError,
    NonFiniteJsonNumberError,
    NotPlainJsonError,
    WorkflowError,
)
from runledger.domain.human_decisions import (
    HumanDecision,
    check_cancel_provenance,
    check_flag,
    check_identifier,
    check_request,
)
from runledger.domain.ids import continuation_run_id_for, decision_id_for
from runledger.domain.values import Actor
from tests.support.specification import Event, events_of, given

NOW = datetime(2026, 1, 1, tzinfo=UTC)
DEADLINE = NOW + timedelta(hours=1)
BEFORE = DEADLINE - timedelta(milliseconds=1)
AFTER = DEADLINE + timedelta(milliseconds=1)
HOST = Actor("host")
ALICE = Actor("human", "alice")
BOB = Actor("human", "bob")
REQUEST: dict[str, Any] = {
    "title": "Ship the release?",
    "choices": ["ship", "hold"],
    "expiresAt": "2026-01-01T01:00:00Z",
}
YES = {"choice": "ship"}
NO = {"choice": "hold"}
DECISION_ID = decision_id_for("run-1", "approve", "attempt-1")

Command = Callable[[HumanDecision], object]


def opened(request: dict[str, Any] | None = None) -> HumanDecision:
    return HumanDecision.open(
        DECISION_ID,
        run_id="run-1",
        node_id="approve",
        attempt_id="attempt-1",
        request=check_request(REQUEST if request is None else request),
        actor=HOST,
        now=NOW,
    )


def history(*commands: Command, request: dict[str, Any] | None = None) -> list[Event]:
    return events_of(opened(request), *commands)


def answered(
    response: dict[str, Any], submission_id: str = "submission-1", *, at: datetime = NOW
) -> Command:
    return lambda decision: decision.submit(submission_id, response, actor=ALICE, now=at)


def timed_out(at: datetime = AFTER) -> Command:
    return lambda decision: decision.apply_timeout(now=at)


def cancelled(provenance: str = "explicit_cancel", at: datetime = NOW) -> Command:
    return lambda decision: decision.cancel(check_cancel_provenance(provenance), now=at)


WITH_DEFAULT = {**REQUEST, "defaultResponse": NO}
WITHOUT_DEADLINE = {"title": "Ship the release?"}


# -- ids ----------------------------------------------------------------------------------


def test_the_decision_id_is_40_hex_of_the_canonical_subject_digest() -> None:
    subject = '{"attemptId":"attempt-1","nodeId":"approve","runId":"run-1"}'
    expected = "decision-" + hashlib.sha256(subject.encode()).hexdigest()[:40]
    assert decision_id_for("run-1", "approve", "attempt-1") == expected


def test_the_continuation_child_is_named_after_the_decision() -> None:
    assert continuation_run_id_for("decision-abc") == "continuation-abc"


# -- the request --------------------------------------------------------------------------


def test_requesting_records_the_request_and_its_digest() -> None:
    given(HumanDecision, []).when_creating(opened).then(
        [
            (
                "decision.requested",
                {
                    "decision_id": DECISION_ID,
                    "run_id": "run-1",
                    "node_id": "approve",
                    "attempt_id": "attempt-1",
                    "request": REQUEST,
                    "request_digest": json_digest(REQUEST),
                },
            )
        ]
    )


def test_a_new_decision_is_pending_with_its_deadline() -> None:
    record = opened().to_record()
    assert (record.status, record.expires_at, record.provenance) == ("pending", DEADLINE, None)
    assert record.default_response is None


def test_the_same_request_in_another_key_order_is_the_same_request() -> None:
    decision = given(HumanDecision, history()).aggregate
    assert decision is not None
    decision.check_same_request(dict(reversed(list(REQUEST.items()))))


def test_another_request_for_the_same_attempt_conflicts() -> None:
    given(HumanDecision, history()).when(
        lambda decision: decision.check_same_request({**REQUEST, "title": "Other"})
    ).then_raises(DecisionRequestConflictError, "Immutable human decision request conflicts")


@pytest.mark.parametrize(
    ("request_value", "message"),
    [
        pytest.param(["title"], "Human decision request must be a JSON object", id="not-object"),
        pytest.param({}, "Human decision request title must be non-empty text", id="no-title"),
        pytest.param(
            {"title": "  "}, "Human decision request title must be non-empty text", id="blank"
        ),
        pytest.param(
            {"title": 7}, "Human decision request title must be non-empty text", id="number"
        ),
        pytest.param(
            {"title": "t", "choices": ["a", "a"]},
            "Human decision request choices must be distinct non-empty strings",
            id="duplicate-choices",
        ),
        pytest.param(
            {"title": "t", "choices": ["a", ""]},
            "Human decision request choices must be distinct non-empty strings",
            id="empty-choice",
        ),
        pytest.param(
            {"title": "t", "choices": []},
            "Human decision request choices must be distinct non-empty strings",
            id="no-choices",
        ),
        pytest.param(
            {"title": "t", "choices": "a"},
            "Human decision request choices must be distinct non-empty strings",
            id="choices-text",
        ),
        pytest.param(
            {"title": "t", "expiresAt": "tomorrow"},
            "Human decision request expiresAt must be an ISO-8601 time with a UTC offset",
            id="bad-deadline",
        ),
        pytest.param(
            {"title": "t", "expiresAt": "2026-01-01T01:00:00"},
            "Human decision request expiresAt must be an ISO-8601 time with a UTC offset",
            id="naive-deadline",
        ),
        pytest.param(
            {"title": "t", "expiresAt": 1767229200},
            "Human decision request expiresAt must be an ISO-8601 time with a UTC offset",
            id="numeric-deadline",
        ),
        pytest.param(
            {"title": "t", "choices": ["a"], "defaultResponse": {"choice": "b"}},
            "Human decision response is not one of the choices",
            id="default-not-a-choice",
        ),
        pytest.param(
            {"title": "t", "defaultResponse": "a"},
            "Human decision response must be a JSON object",
            id="default-not-object",
        ),
    ],
)
def test_a_malformed_request_is_refused(request_value: Any, message: str) -> None:
    with pytest.raises(WorkflowError) as caught:
        check_request(request_value)
    assert str(caught.value) == message


@pytest.mark.parametrize(
    ("request_value", "error_class"),
    [
        pytest.param({"title": "\ud800"}, InvalidDecisionJsonError, id="lone-surrogate"),
        pytest.param({"title": "t", "\udfff": 1}, InvalidDecisionJsonError, id="surrogate-key"),
        pytest.param({"title": "t", "x": "é" * 40_000}, InvalidDecisionJsonError, id="too-big"),
        pytest.param({"title": "t", "n": float("nan")}, NonFiniteJsonNumberError, id="nan"),
        pytest.param({"title": "t", 1: "x"}, NotPlainJsonError, id="number-key"),
        pytest.param({"title": "t", "x": {1, 2}}, NotPlainJsonError, id="set"),
    ],
)
def test_a_request_that_is_not_storable_json_is_refused(
    request_value: Any, error_class: type[WorkflowError]
) -> None:
    with pytest.raises(error_class):
        check_request(request_value)


def test_a_request_nested_deeper_than_64_levels_is_refused_before_recursing() -> None:
    deep: Any = "leaf"
    for _ in range(5000):
        deep = [deep]
    with pytest.raises(InvalidDecisionJsonError):
        check_request({"title": "t", "deep": deep})


def test_the_checked_request_is_a_copy_the_caller_cannot_change() -> None:
    choices = ["a", "b"]
    request = {"title": "t", "choices": choices}
    checked = check_request(request)
    choices.append("c")
    assert checked == {"title": "t", "choices": ["a", "b"]}


@pytest.mark.parametrize("value", [None, "", "  ", 3, "x" * 513, "\ud800"])
def test_identifiers_must_be_short_non_empty_text(value: Any) -> None:
    with pytest.raises(InvalidDecisionFieldError) as caught:
        check_identifier("node ID", value)
    assert str(caught.value) == (
        "Human decision node ID must be a non-empty string of at most 512 characters"
    )


@pytest.mark.parametrize("value", [None, 1, "yes"])
def test_flags_must_be_booleans(value: Any) -> None:
    with pytest.raises(InvalidDecisionFlagError):
        check_flag("continue_run", value)


# -- answers ------------------------------------------------------------------------------


def test_the_first_answer_wins_and_accepts_the_decision() -> None:
    decision = (
        given(HumanDecision, history())
        .when(answered(YES))
        .then(
            [
                (
                    "decision.answer-submitted",
                    {
                        "submission_id": "submission-1",
                        "response": YES,
                        "answer_digest": json_digest(YES),
                        "outcome": "won",
                        "actor": ALICE.to_json(),
                    },
                ),
                (
                    "decision.accepted",
                    {
                        "provenance": "human",
                        "submission_id": "submission-1",
                        "response": YES,
                        "answer_digest": json_digest(YES),
                    },
                ),
            ]
        )
    )
    record = decision.to_record()
    assert (record.status, record.provenance, record.response) == ("accepted", "human", YES)
    assert (record.revision, record.resolved_at) == (3, NOW)
    assert [(s.submission_id, s.outcome) for s in record.submissions] == [("submission-1", "won")]


def test_submit_returns_won_for_the_winning_answer() -> None:
    then = given(HumanDecision, history()).when(answered(YES))
    assert then.result == "won"


def test_an_answer_outside_the_choices_is_refused() -> None:
    given(HumanDecision, history()).when(answered({"choice": "maybe"})).then_raises(
        DecisionResponseNotAChoiceError, "Human decision response is not one of the choices"
    )


def test_an_answer_that_is_not_an_object_is_refused() -> None:
    not_an_object: Any = "ship"
    given(HumanDecision, history()).when(answered(not_an_object)).then_raises(
        InvalidDecisionResponseError, "Human decision response must be a JSON object"
    )


def test_without_choices_any_object_is_an_answer() -> None:
    then = given(HumanDecision, history(request=WITHOUT_DEADLINE)).when(answered({"note": "fine"}))
    assert then.result == "won"


def test_an_answer_at_the_deadline_is_too_late() -> None:
    given(HumanDecision, history()).when(answered(YES, at=DEADLINE)).then_raises(
        DecisionExpiredError, "Human decision request expired before the answer was accepted"
    )


def test_an_answer_just_before_the_deadline_wins() -> None:
    then = given(HumanDecision, history()).when(answered(YES, at=BEFORE))
    assert then.result == "won"


def test_the_winning_submission_repeated_is_adopted_and_writes_nothing() -> None:
    then = given(HumanDecision, history(answered(YES))).when(answered(YES))
    assert then.result == "adopted"
    then.then([])


def test_the_winning_submission_repeated_after_the_deadline_is_still_adopted() -> None:
    then = given(HumanDecision, history(answered(YES))).when(answered(YES, at=AFTER))
    assert then.result == "adopted"
    then.then([])


def test_another_submission_with_the_same_answer_finds_it_already_resolved() -> None:
    then = given(HumanDecision, history(answered(YES))).when(answered(YES, "submission-2"))
    assert then.result == "already_resolved"
    then.then(
        [
            (
                "decision.answer-submitted",
                {"submission_id": "submission-2", "outcome": "already_resolved"},
            )
        ]
    )


def test_a_different_answer_after_acceptance_conflicts() -> None:
    then = given(HumanDecision, history(answered(YES))).when(answered(NO, "submission-2"))
    assert then.result == "conflict"
    then.then([("decision.answer-submitted", {"submission_id": "submission-2", "response": NO})])


def test_the_winning_submission_changed_to_another_answer_conflicts_and_writes_nothing() -> None:
    then = given(HumanDecision, history(answered(YES))).when(answered(NO))
    assert then.result == "conflict"
    then.then([])


def test_a_conflicting_submission_repeated_gets_its_outcome_again_and_writes_nothing() -> None:
    then = given(HumanDecision, history(answered(YES), answered(NO, "submission-2"))).when(
        answered(NO, "submission-2")
    )
    assert then.result == "conflict"
    then.then([])


def test_an_answer_to_a_cancelled_decision_finds_it_already_resolved() -> None:
    then = given(HumanDecision, history(cancelled())).when(answered(YES))
    assert then.result == "already_resolved"
    then.then([("decision.answer-submitted", {"outcome": "already_resolved"})])


def test_the_timeout_default_answer_repeated_by_a_human_is_already_resolved() -> None:
    then = given(HumanDecision, history(timed_out(), request=WITH_DEFAULT)).when(
        answered(NO, at=AFTER)
    )
    assert then.result == "already_resolved"


# -- deadline and timeout policy ------------------------------------------------------------


def test_the_timeout_before_the_deadline_is_not_eligible() -> None:
    given(HumanDecision, history(request=WITH_DEFAULT)).when(timed_out(BEFORE)).then_raises(
        DecisionTimeoutNotEligibleError, "Human decision timeout default is not eligible yet"
    )


def test_a_decision_without_a_deadline_never_times_out() -> None:
    given(HumanDecision, history(request=WITHOUT_DEADLINE)).when(timed_out()).then_raises(
        DecisionTimeoutNotEligibleError, "Human decision timeout default is not eligible yet"
    )


def test_the_timeout_at_the_deadline_accepts_the_default_by_policy() -> None:
    decision = (
        given(HumanDecision, history(request=WITH_DEFAULT))
        .when(timed_out(DEADLINE))
        .then(
            [
                (
                    "decision.accepted",
                    {
                        "provenance": "timeout_policy",
                        "submission_id": None,
                        "response": NO,
                        "actor": {"type": "policy", "id": None},
                    },
                )
            ]
        )
    )
    assert (decision.status, decision.revision) == ("accepted", 2)


def test_the_timeout_without_a_default_cancels_as_expired() -> None:
    decision = (
        given(HumanDecision, history())
        .when(timed_out())
        .then(
            [
                (
                    "decision.cancelled",
                    {"provenance": "expired_no_default", "actor": {"type": "policy", "id": None}},
                )
            ]
        )
    )
    assert decision.to_record().status == "cancelled"


def test_the_timeout_after_an_answer_changes_nothing() -> None:
    given(HumanDecision, history(answered(YES), request=WITH_DEFAULT)).when(timed_out()).then([])


# -- cancellation ---------------------------------------------------------------------------


def test_an_explicit_cancel_is_recorded_with_its_provenance_by_control() -> None:
    given(HumanDecision, history()).when(cancelled()).then(
        [
            (
                "decision.cancelled",
                {"provenance": "explicit_cancel", "actor": {"type": "control", "id": None}},
            )
        ]
    )


def test_cancelling_a_cancelled_decision_again_changes_nothing() -> None:
    given(HumanDecision, history(cancelled())).when(cancelled()).then([])


def test_an_accepted_decision_cannot_be_cancelled() -> None:
    given(HumanDecision, history(answered(YES))).when(cancelled()).then_raises(
        DecisionAlreadyAcceptedError, f"Human decision is already accepted: {DECISION_ID}"
    )


def test_cancelling_as_expired_before_the_deadline_is_not_eligible() -> None:
    given(HumanDecision, history()).when(cancelled("expired_no_default", BEFORE)).then_raises(
        DecisionTimeoutNotEligibleError, "Human decision timeout default is not eligible yet"
    )


def test_cancelling_as_expired_a_decision_with_a_default_is_refused() -> None:
    given(HumanDecision, history(request=WITH_DEFAULT)).when(
        cancelled("expired_no_default", AFTER)
    ).then_raises(
        DecisionHasTimeoutDefaultError,
        "Human decision has a timeout default; apply the timeout policy instead: " + DECISION_ID,
    )


def test_cancelling_as_expired_after_the_deadline_is_recorded_by_policy() -> None:
    given(HumanDecision, history()).when(cancelled("expired_no_default", AFTER)).then(
        [("decision.cancelled", {"provenance": "expired_no_default"})]
    )


@pytest.mark.parametrize("provenance", ["human", "timeout_policy", "", None, 1])
def test_only_the_two_cancellation_provenances_are_accepted(provenance: Any) -> None:
    with pytest.raises(InvalidCancellationProvenanceError) as caught:
        check_cancel_provenance(provenance)
    assert str(caught.value) == (
        "Human decision cancellation provenance must be one of: explicit_cancel, expired_no_default"
    )


# -- receipt and continuation ----------------------------------------------------------------


def test_the_receipt_has_the_section_3_7_fields() -> None:
    decision = given(HumanDecision, history(answered(YES))).aggregate
    assert decision is not None
    subject = {"attemptId": "attempt-1", "nodeId": "approve", "runId": "run-1"}
    assert decision.receipt() == {
        "schema": "pi-workflows.human-decision-receipt.v1",
        "decisionId": DECISION_ID,
        "requestDigest": json_digest(REQUEST),
        "nodeId": "approve",
        "response": YES,
        "provenance": "human",
        "acceptedAt": NOW.isoformat(),
        "answerDigest": json_digest(YES),
        "subjectDigest": json_digest(subject),
        "presentationDigest": json_digest(REQUEST),
        "revision": 3,
    }


def test_a_receipt_of_the_timeout_policy_says_timeout() -> None:
    decision = given(HumanDecision, history(timed_out(), request=WITH_DEFAULT)).aggregate
    assert decision is not None
    receipt = decision.receipt()
    assert (receipt["provenance"], receipt["response"], receipt["revision"]) == ("timeout", NO, 2)


@pytest.mark.parametrize(
    "commands", [pytest.param((), id="pending"), pytest.param((cancelled(),), id="cancelled")]
)
def test_a_decision_that_is_not_accepted_has_no_receipt(commands: tuple[Command, ...]) -> None:
    given(HumanDecision, history(*commands)).when(lambda d: d.receipt()).then_raises(
        DecisionNotAcceptedError, f"Human decision is not accepted: {DECISION_ID}"
    )


def continued(child: str) -> Command:
    return lambda decision: decision.record_continuation(child, actor=HOST, now=NOW)


def test_the_continuation_is_recorded_on_the_decision() -> None:
    child = continuation_run_id_for(DECISION_ID)
    decision = (
        given(HumanDecision, history(answered(YES)))
        .when(continued(child))
        .then([("decision.continuation-created", {"continuation_run_id": child})])
    )
    assert decision.continued_into(child) is True


def test_a_continuation_into_another_run_conflicts() -> None:
    child = continuation_run_id_for(DECISION_ID)
    given(HumanDecision, history(answered(YES), continued(child))).when(
        lambda decision: decision.continued_into("other-child")
    ).then_raises(
        DecisionContinuationConflictError, "Immutable human decision continuation conflicts"
    )


def test_a_decision_not_yet_continued_has_no_continuation() -> None:
    decision = given(HumanDecision, history(answered(YES))).aggregate
    assert decision is not None
    assert decision.continued_into(continuation_run_id_for(DECISION_ID)) is False
