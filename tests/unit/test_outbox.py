"""Follow-ups and their messages across aggregates (upstream §4.2, §4.3, §5.2)."""

from __future__ import annotations

from typing import Any

from runledger.domain.errors import (
    FollowUpRequestReusedError,
    NotOriginSessionError,
    RunNotAcceptingChangesError,
    SentFollowUpRemovalError,
)
from runledger.domain.follow_ups import FollowUp
from runledger.domain.ids import follow_up_id_for
from runledger.domain.outbox import Queued, queue_follow_up, remove_follow_up
from runledger.domain.values import Actor
from tests.support.specification import Then, given_events, history_of
from tests.support.steps import LATER, SESSION, SESSION_ACTOR, Step, created, ended, queued, sent

HUMAN = Actor("human", "user-1")


def when_queueing(*steps: Step, target: str = SESSION, prompt: str = "a prompt") -> Then[Any]:
    """Queue request "a" on run-1: the very request ``queued("run-1", "a")`` made, unless told."""
    return given_events(history_of(*steps)).when(
        lambda aggregates: queue_follow_up(
            aggregates,
            "run-1",
            request_id="a",
            target_session_id=target,
            actor=SESSION_ACTOR,
            source="workflow-tool",
            prompt=prompt,
            now=LATER,
        )
    )


def removing(actor: Actor = HUMAN) -> Step:
    """Remove follow-up "a" of run-1 through an interactive command."""
    return lambda aggregates: remove_follow_up(
        aggregates,
        "run-1",
        follow_up_id_for("run-1", "a"),
        actor=actor,
        source="interactive-command",
        now=LATER,
    )


def when_removing(*steps: Step, actor: Actor = HUMAN) -> Then[Any]:
    return given_events(history_of(*steps)).when(removing(actor))


def test_queueing_records_the_order_on_the_run_then_the_follow_up_and_its_message() -> None:
    when_queueing(created()).then(
        [
            ("run.follow-up-accepted", {"order": 1}),
            ("follow-up.queued", {"order": 1, "request_id": "a"}),
            ("workflow-message.created", {"kind": "followUp", "target_session_id": SESSION}),
        ]
    )


def test_the_same_request_after_the_run_ended_is_adopted_without_a_write() -> None:
    outcome = when_queueing(created(), queued("run-1", "a"), ended("run-1"))
    outcome.then([])
    assert isinstance(outcome.result, Queued)
    assert (outcome.result.follow_up.state, outcome.result.adopted) == ("cancelled", True)


def test_a_reused_request_id_is_refused_before_the_run_status() -> None:
    when_queueing(created(), queued("run-1", "a"), ended("run-1"), prompt="other").then_raises(
        FollowUpRequestReusedError,
        "Workflow follow-up request ID was reused with different content",
    )


def test_a_run_that_ended_takes_no_new_follow_up() -> None:
    when_queueing(created(), ended("run-1")).then_raises(
        RunNotAcceptingChangesError, "Workflow run run-1 does not accept changes with status failed"
    )


def test_a_follow_up_for_another_session_is_refused() -> None:
    when_queueing(created(), target="session-2").then_raises(
        NotOriginSessionError, "Workflow follow-ups must target the run's origin Pi session"
    )


def test_removing_cancels_the_pending_message_with_the_follow_up() -> None:
    when_removing(created(), queued("run-1", "a")).then(
        [
            ("follow-up.removed", {"reason": "Removed before delivery"}),
            ("workflow-message.cancelled", {"kind": "followUp"}),
        ]
    )


def test_a_follow_up_whose_message_was_sent_cannot_be_removed() -> None:
    when_removing(created(), queued("run-1", "a"), sent("run-1", "a")).then_raises(
        SentFollowUpRemovalError, "A sent workflow follow-up cannot be removed"
    )


def test_removing_again_answers_with_the_removal_without_an_authority_check() -> None:
    outcome = when_removing(created(), queued("run-1", "a"), removing(), actor=Actor("host"))
    outcome.then([])
    assert isinstance(outcome.result, FollowUp)
    assert outcome.result.state == "removed"
