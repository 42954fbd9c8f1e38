"""How a run ends (upstream §4.6, §5.6; DESIGN decisions 1, 2 and 8), across its aggregates."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.domain.aggregates import AggregateSet
from runledger.domain.errors import (
    InvalidRunFieldError,
    InvalidRunStatusError,
    RunAlreadyEndedError,
)
from runledger.domain.ids import follow_up_id_for, follow_up_message_id
from runledger.domain.outbox import remove_follow_up
from runledger.domain.run_endings import finish_run, interrupt_run
from runledger.domain.values import HOST, Actor
from tests.support.specification import GivenEvent, Then, given_events, history_of
from tests.support.steps import (
    LATER,
    SESSION,
    Step,
    created,
    ended,
    queued,
    restart_child,
    sent,
)

SYSTEM_JSON = {"type": "system", "id": None}
INTERRUPTED = "Workflow host stopped before the run finished"


def follow_up_id(run_id: str, request_id: str) -> str:
    return follow_up_id_for(run_id, request_id)


def cancelled(run_id: str, request_id: str, *, ended_run_id: str, **payload: Any) -> list[Any]:
    """The two events that cancel one follow-up and its pending message."""
    follow_up = follow_up_id(run_id, request_id)
    return [
        (
            "follow-up.cancelled",
            {
                "follow_up_id": follow_up,
                "run_id": run_id,
                "ended_run_id": ended_run_id,
                "actor": SYSTEM_JSON,
                **payload,
            },
        ),
        (
            "workflow-message.cancelled",
            {"workflow_message_id": follow_up_message_id(follow_up), "actor": SYSTEM_JSON},
        ),
    ]


TERMINAL = ("workflow-message.created", {"kind": "terminal", "target_session_id": SESSION})


def finishing(run_id: str, status: str = "failed", **outcome: Any) -> Any:
    return lambda aggregates: finish_run(
        aggregates,
        aggregates.run(run_id),
        status=status,
        final_output=outcome.get("final_output"),
        error=outcome.get("error", "boom" if status != "completed" else None),
        status_detail=outcome.get("status_detail"),
        actor=HOST,
        now=LATER,
    )


def when_finishing(*steps: Step, run_id: str = "run-1", **outcome: Any) -> Then[Any]:
    return given_events(history_of(*steps)).when(finishing(run_id, **outcome))


# -- the cascade (§4.6) ------------------------------------------------------------------------


def test_a_failed_end_cancels_the_runs_queued_follow_ups_and_their_pending_messages() -> None:
    when_finishing(created(), queued("run-1", "a"), queued("run-1", "b")).then(
        [
            ("run.finished", {"status": "failed", "error": "boom"}),
            *cancelled("run-1", "a", ended_run_id="run-1", status="failed", reason="boom"),
            *cancelled("run-1", "b", ended_run_id="run-1", status="failed", reason="boom"),
            TERMINAL,
        ]
    )


@pytest.mark.parametrize("status", ["timed_out", "cancelled"])
def test_an_end_without_an_error_gives_upstreams_reason(status: str) -> None:
    when_finishing(created(), queued("run-1", "a"), status=status, error=None).then(
        [
            ("run.finished", {"status": status}),
            *cancelled(
                "run-1",
                "a",
                ended_run_id="run-1",
                status=status,
                reason=f"Workflow ended with status {status}",
            ),
            TERMINAL,
        ]
    )


def test_a_completed_end_leaves_queued_follow_ups_queued() -> None:
    when_finishing(created(), queued("run-1", "a"), status="completed").then(
        [("run.finished", {"status": "completed"}), TERMINAL]
    )


def test_a_failed_continuation_cancels_its_parents_follow_ups_and_tells_the_parent() -> None:
    when_finishing(
        created("run-1"),
        created("run-2", parent_run_id="run-1"),
        queued("run-1", "on-parent"),
        queued("run-2", "on-child"),
        run_id="run-2",
    ).then(
        [
            ("run.finished", {"run_id": "run-2"}),
            (
                "run.continuation-ended",
                {"run_id": "run-1", "continuation_run_id": "run-2", "status": "failed"},
            ),
            *cancelled("run-2", "on-child", ended_run_id="run-2", reason="boom"),
            *cancelled("run-1", "on-parent", ended_run_id="run-2", reason="boom"),
            TERMINAL,
        ]
    )


def test_an_ended_continuation_ancestor_is_not_told_but_its_queued_follow_ups_are_cancelled() -> (
    None
):
    when_finishing(
        created("run-1"),
        queued("run-1", "on-parent"),
        ended("run-1", "completed"),
        created("run-2", parent_run_id="run-1"),
        run_id="run-2",
    ).then(
        [
            ("run.finished", {"run_id": "run-2"}),
            *cancelled("run-1", "on-parent", ended_run_id="run-2", reason="boom"),
            TERMINAL,
        ]
    )


def test_a_failed_restart_child_leaves_its_parents_follow_ups_alone() -> None:
    when_finishing(
        created("run-1"),
        queued("run-1", "on-parent"),
        restart_child("run-2", parent_run_id="run-1"),
        run_id="run-2",
    ).then([("run.finished", {"run_id": "run-2"}), TERMINAL])


def test_a_follow_up_whose_message_was_sent_is_not_cancelled() -> None:
    when_finishing(created(), queued("run-1", "a"), queued("run-1", "b"), sent("run-1", "a")).then(
        [
            ("run.finished", {"status": "failed"}),
            *cancelled("run-1", "b", ended_run_id="run-1", reason="boom"),
            TERMINAL,
        ]
    )


def test_a_message_given_as_sent_keeps_its_follow_up_from_the_cascade() -> None:
    follow_up = follow_up_id("run-1", "a")
    history: list[GivenEvent] = [
        *history_of(created(), queued("run-1", "a")),
        (
            "workflow-message.sent",
            {
                "workflow_message_id": follow_up_message_id(follow_up),
                "run_id": "run-1",
                "kind": "followUp",
                "source_id": follow_up,
                "target_session_id": SESSION,
                "pi_session_entry_id": "entry-1",
            },
        ),
    ]
    given_events(history).when(finishing("run-1")).then([("run.finished", {}), TERMINAL])


def test_removed_follow_ups_are_not_cancelled_again() -> None:
    def removed(aggregates: AggregateSet) -> None:
        remove_follow_up(
            aggregates,
            "run-1",
            follow_up_id("run-1", "a"),
            actor=Actor("human"),
            source="interactive-command",
            now=LATER,
        )

    when_finishing(created(), queued("run-1", "a"), removed).then([("run.finished", {}), TERMINAL])


# -- the terminal message (§5.6, decision 8) ---------------------------------------------------


def test_an_interactive_run_gets_its_terminal_message_in_the_same_commit() -> None:
    aggregates = when_finishing(created(), status="completed", final_output={"reply": "done"}).then(
        [
            ("run.finished", {"status": "completed"}),
            (
                "workflow-message.created",
                {"kind": "terminal", "source_id": "terminal:run-1", "target_session_id": SESSION},
            ),
        ]
    )
    run = aggregates.run("run-1")
    message = aggregates.message(run.terminal_message_id)
    assert message.content["details"]["terminal"]["finalOutput"] == {"reply": "done"}


@pytest.mark.parametrize(
    "step",
    [created(execution_mode="headless"), created(session_id=None)],
    ids=["headless", "unbound"],
)
def test_a_headless_or_unbound_run_gets_no_terminal_message(step: Step) -> None:
    when_finishing(step, status="completed").then(
        [("run.finished", {"status": "completed", "terminal_message_id": None})]
    )


def test_the_terminal_message_lists_the_ended_ancestors_outcomes() -> None:
    aggregates = when_finishing(
        created("run-1"),
        ended("run-1", "failed", error="first boom"),
        restart_child("run-2", parent_run_id="run-1"),
        run_id="run-2",
        status="completed",
    ).then([("run.finished", {}), TERMINAL])
    message = aggregates.message(aggregates.run("run-2").terminal_message_id)
    outcomes = message.content["details"]["terminal"]["earlierOutcomes"]
    assert [(o["runId"], o["status"], o["error"]) for o in outcomes] == [
        ("run-1", "failed", "first boom")
    ]


# -- finish checks, in order -------------------------------------------------------------------


def test_a_finish_status_is_checked_before_whether_the_run_ended() -> None:
    when_finishing(created(), ended("run-1"), status="running").then_raises(
        InvalidRunStatusError,
        "Workflow run status running is not one of: completed, failed, timed_out, cancelled",
    )


def test_an_ended_run_is_refused_before_its_error_is_checked() -> None:
    when_finishing(created(), ended("run-1", "timed_out"), error=5).then_raises(
        RunAlreadyEndedError, "Workflow run run-1 already ended with status timed_out"
    )


def test_the_error_is_checked_before_the_status_detail() -> None:
    when_finishing(created(), error=5, status_detail=6).then_raises(
        InvalidRunFieldError, "Workflow run error must be text or None"
    )


def test_a_status_detail_that_is_not_text_is_refused() -> None:
    when_finishing(created(), status_detail=6).then_raises(
        InvalidRunFieldError, "Workflow run status_detail must be text or None"
    )


# -- interruption ------------------------------------------------------------------------------


def interrupting(run_id: str = "run-1") -> Any:
    return lambda aggregates: interrupt_run(
        aggregates, aggregates.run(run_id), INTERRUPTED, actor=HOST, now=LATER
    )


def test_interrupting_a_running_run_fails_it_and_cancels_its_follow_ups() -> None:
    given_events(history_of(created(), queued("run-1", "a"))).when(interrupting()).then(
        [
            ("run.finished", {"status": "failed", "error": INTERRUPTED, "interrupted": True}),
            *cancelled("run-1", "a", ended_run_id="run-1", reason=INTERRUPTED),
            TERMINAL,
        ]
    )


@pytest.mark.parametrize(
    "steps",
    [(created(status="waiting"),), (created(), ended("run-1", "completed"))],
    ids=["waiting", "ended"],
)
def test_interrupting_a_run_that_is_not_running_changes_nothing(steps: tuple[Step, ...]) -> None:
    given_events(history_of(*steps)).when(interrupting()).then([])
