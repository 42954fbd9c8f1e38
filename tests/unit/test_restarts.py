"""Restart preconditions in upstream §3.8's order, with DESIGN decision 9, across aggregates."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from runledger.domain.aggregates import AggregateSet
from runledger.domain.errors import (
    CancelledRunRestartError,
    RepeatedTerminalOutcomeError,
    RestartLimitError,
    RestartRequiresTurnError,
    RunNotFoundError,
    RunOfAnotherSessionError,
    StaleTerminalResultError,
    StaleTerminalTurnError,
)
from runledger.domain.ids import restart_run_id
from runledger.domain.outbox import adopt_branch, start_turn
from runledger.domain.restarts import Restart, restart_run
from runledger.domain.values import HOST
from tests.support.specification import Then, given_events, history_of
from tests.support.steps import LATER, NOW, SESSION, Step, created, ended, restart_child

ANOTHER_SESSION = "Workflow run belongs to another Pi session"
STALE = "Workflow terminal result is stale or was replaced"


def terminal_id(aggregates: AggregateSet, run_id: str) -> str:
    message_id = aggregates.run(run_id).terminal_message_id
    assert message_id is not None
    return message_id


def terminal_sent(run_id: str = "run-1") -> Step:
    """The run's terminal message reported in its session's branch."""

    def step(aggregates: AggregateSet) -> None:
        message_id = terminal_id(aggregates, run_id)
        adopt_branch(
            aggregates, SESSION, [(message_id, f"entry-{run_id}")], frozenset({message_id}), now=NOW
        )

    return step


def terminal_turn(run_id: str = "run-1") -> Step:
    """The model turn ``turn-<run id>`` that the run's sent terminal message triggered."""
    return lambda aggregates: start_turn(
        aggregates,
        terminal_id(aggregates, run_id),
        run_id=run_id,
        target_session_id=SESSION,
        workflow_turn_id=f"turn-{run_id}",
        now=NOW,
    )


def presented(run_id: str = "run-1", status: str = "failed") -> tuple[Step, ...]:
    """The run ended, its terminal message sent, and a model turn on it."""
    return (ended(run_id, status), terminal_sent(run_id), terminal_turn(run_id))


def restarting(
    run_id: str = "run-1",
    *,
    session_id: str = SESSION,
    message_id: str | None = None,
    turn_id: str | None = None,
) -> Any:
    return lambda aggregates: restart_run(
        aggregates,
        aggregates.run(run_id, missing=RunNotFoundError),
        session_id=session_id,
        workflow_message_id=message_id or terminal_id(aggregates, run_id),
        workflow_turn_id=turn_id,
        now=LATER,
    )


def when_restarting(*steps: Step, **request: Any) -> Then[AggregateSet]:
    return given_events(history_of(*steps)).when(restarting(**request))


# -- a new restart child -----------------------------------------------------------------------


def test_a_restart_queues_a_child_bound_to_the_session_and_points_the_source_at_it() -> None:
    outcome = when_restarting(created(), *presented())
    aggregates = outcome.then(
        [
            (
                "run.restart-child-created",
                {
                    "run_id": "run-1",
                    "workflow_turn_id": "turn-run-1",
                    "actor": {"type": "session", "id": SESSION},
                },
            ),
            (
                "run.created",
                {
                    "status": "queued",
                    "lineage_kind": "restart",
                    "parent_run_id": "run-1",
                    "root_run_id": "run-1",
                    "restart_number": 1,
                },
            ),
            ("run.session-bound", {"session_id": SESSION, "execution_mode": "interactive"}),
        ]
    )
    restart = outcome.result
    assert isinstance(restart, Restart)
    child, adopted = restart
    source = aggregates.run("run-1")
    assert (child.run_id, adopted) == (restart_run_id(terminal_id(aggregates, "run-1")), False)
    assert child.parent_terminal_fingerprint == source.terminal_fingerprint


def test_restarting_again_adopts_the_existing_child_and_writes_nothing() -> None:
    outcome = when_restarting(created(), *presented(), restarting())
    outcome.then([])
    assert isinstance(outcome.result, Restart)
    assert (outcome.result.child.restart_number, outcome.result.adopted) == (1, True)


# -- preconditions, in order -------------------------------------------------------------------


def test_another_session_is_refused_before_the_message_is_looked_at() -> None:
    when_restarting(
        created(), ended("run-1"), session_id="session-2", message_id="stale"
    ).then_raises(RunOfAnotherSessionError, ANOTHER_SESSION)


def test_a_headless_run_belongs_to_no_session_that_could_restart_it() -> None:
    when_restarting(created(execution_mode="headless"), ended("run-1"), message_id="x").then_raises(
        RunOfAnotherSessionError, ANOTHER_SESSION
    )


def test_a_cancelled_run_is_refused_before_the_message_is_looked_at() -> None:
    when_restarting(created(), ended("run-1", "cancelled"), message_id="stale").then_raises(
        CancelledRunRestartError, "An explicitly cancelled workflow cannot be restarted"
    )


def test_the_restart_limit_is_checked_before_the_message() -> None:
    chain = (
        created("run-0"),
        restart_child("run-1", parent_run_id="run-0"),
        restart_child("run-2", parent_run_id="run-1"),
        restart_child("run-3", parent_run_id="run-2"),
        ended("run-3"),
    )
    when_restarting(*chain, run_id="run-3", message_id="stale").then_raises(
        RestartLimitError, "Workflow restart limit reached (3 restarts)"
    )


def test_a_message_that_is_not_the_runs_terminal_message_is_stale() -> None:
    when_restarting(created(), *presented(), message_id="workflow-message-other").then_raises(
        StaleTerminalResultError, STALE
    )


def test_a_terminal_message_that_was_not_sent_is_stale() -> None:
    when_restarting(created(), ended("run-1")).then_raises(StaleTerminalResultError, STALE)


def test_a_sent_terminal_message_without_a_turn_cannot_restart() -> None:
    when_restarting(created(), ended("run-1"), terminal_sent()).then_raises(
        RestartRequiresTurnError, "Workflow restart requires a terminal model turn"
    )


def test_a_named_turn_must_be_the_terminal_messages_turn() -> None:
    when_restarting(created(), *presented(), turn_id="turn-0").then_raises(
        StaleTerminalTurnError, "Workflow terminal turn is stale"
    )


def started(run_id: str) -> Step:
    """A queued restart child started by its worker."""
    return lambda aggregates: aggregates.run(run_id).record_progress(
        status="running",
        current_node=None,
        current_attempt_id=None,
        waiting_on=None,
        status_detail=None,
        actor=HOST,
        now=NOW,
    )


def repeated_outcome(*then: Callable[[str], Step]) -> tuple[list[Any], str]:
    """run-1 failed and was restarted; its child failed the same way and was presented.

    Returns the history and the child's id; ``then`` are further steps on that child.
    """
    aggregates = AggregateSet()
    for step in (created(), *presented(), restarting()):
        step(aggregates)
    child = aggregates.run("run-1").restart_child_id
    assert child is not None
    for step in (started(child), *presented(child), *(make(child) for make in then)):
        step(aggregates)
    return aggregates.collect_events(), child


def test_the_same_outcome_again_in_the_restart_chain_is_refused() -> None:
    history, child = repeated_outcome()
    given_events(history).when(restarting(child)).then_raises(
        RepeatedTerminalOutcomeError,
        "The same terminal outcome already occurred in this restart chain",
    )


def test_an_existing_restart_child_is_adopted_before_the_same_outcome_rule() -> None:
    history, child = repeated_outcome(lambda child: restart_child("run-3", parent_run_id=child))
    # Given directly: the repeating child already points at a restart child of its own, so
    # only adoption can answer (decision 9 puts it before the same-outcome rule).
    pointer = {
        "run_id": child,
        "child_run_id": "run-3",
        "workflow_message_id": "workflow-message-x",
        "workflow_turn_id": f"turn-{child}",
    }
    outcome = given_events([*history, ("run.restart-child-created", pointer)]).when(
        restarting(child)
    )
    outcome.then([])
    assert isinstance(outcome.result, Restart)
    assert (outcome.result.child.run_id, outcome.result.adopted) == ("run-3", True)


# -- the same outcome anywhere in the tree (§3.8 rule 9) ----------------------------------------


def restarted(run_id: str) -> tuple[Step, ...]:
    """The run ended (failed, "boom"), was presented, and was restarted."""
    return (*presented(run_id), restarting(run_id))


def test_a_siblings_restart_from_the_same_outcome_refuses_the_restart() -> None:
    siblings = (
        created("run-1", status="waiting"),
        created("run-2", parent_run_id="run-1"),
        created("run-3", parent_run_id="run-1"),
        *restarted("run-2"),
        *presented("run-3"),
    )
    when_restarting(*siblings, run_id="run-3").then_raises(
        RepeatedTerminalOutcomeError,
        "The same terminal outcome already occurred in this restart chain",
    )


def test_an_ancestors_restart_on_another_branch_refuses_the_restart() -> None:
    """The issue's case: run-1's restart hangs off run-1, not off run-2's line of parents."""
    tree = (
        created("run-1", status="waiting"),
        created("run-2", parent_run_id="run-1"),
        *restarted("run-1"),
        *presented("run-2"),
    )
    when_restarting(*tree, run_id="run-2").then_raises(
        RepeatedTerminalOutcomeError,
        "The same terminal outcome already occurred in this restart chain",
    )


def test_a_different_outcome_in_the_same_tree_is_restarted() -> None:
    tree = (
        created("run-1", status="waiting"),
        created("run-2", parent_run_id="run-1"),
        created("run-3", parent_run_id="run-1"),
        *restarted("run-2"),
        ended("run-3", error="another failure"),
        terminal_sent("run-3"),
        terminal_turn("run-3"),
    )
    outcome = when_restarting(*tree, run_id="run-3")
    outcome.then(
        [
            ("run.restart-child-created", {"run_id": "run-3"}),
            ("run.created", {"lineage_kind": "restart", "root_run_id": "run-1"}),
            ("run.session-bound", {}),
        ]
    )


def test_the_same_outcome_in_another_tree_is_restarted() -> None:
    trees = (
        created("run-9"),
        *restarted("run-9"),
        created("run-1", status="waiting"),
        created("run-2", parent_run_id="run-1"),
        *presented("run-2"),
    )
    outcome = when_restarting(*trees, run_id="run-2")
    outcome.then(
        [
            ("run.restart-child-created", {"run_id": "run-2"}),
            ("run.created", {"lineage_kind": "restart", "root_run_id": "run-1"}),
            ("run.session-bound", {}),
        ]
    )
