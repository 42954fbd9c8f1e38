"""Creating root and continuation runs (upstream §3.5 A, in its order) and lineage walks."""

from __future__ import annotations

from typing import Any

from runledger.domain.errors import (
    InvalidRunFieldError,
    InvalidWorkflowNameError,
    ParentRunMissingError,
    RunAlreadyExistsError,
)
from runledger.domain.lineage import ancestors, continuation_chain, create_run
from runledger.domain.values import HOST
from tests.support.specification import Then, given_events, history_of
from tests.support.steps import INPUT, NOW, Step, created, restart_child


def when_creating(*steps: Step, run_id: str = "run-2", **fields: Any) -> Then[Any]:
    request: dict[str, Any] = {"workflow_name": "echo", "parent_run_id": None, "status": "running"}
    request.update(fields)
    return given_events(history_of(*steps)).when(
        lambda aggregates: create_run(
            aggregates,
            run_id,
            input=INPUT,
            workflow_ref=None,
            title=None,
            actor=HOST,
            now=NOW,
            **request,
        )
    )


def test_a_child_of_a_parent_is_its_continuation_on_the_same_root() -> None:
    when_creating(created("run-1"), parent_run_id="run-1").then(
        [
            (
                "run.created",
                {
                    "run_id": "run-2",
                    "parent_run_id": "run-1",
                    "root_run_id": "run-1",
                    "lineage_kind": "continuation",
                    "restart_number": 0,
                    "parent_terminal_fingerprint": None,
                },
            )
        ]
    )


def test_a_continuation_inherits_its_parents_restart_number() -> None:
    parents = (created("run-0"), restart_child("run-1", parent_run_id="run-0"))
    when_creating(*parents, parent_run_id="run-1").then(
        [("run.created", {"root_run_id": "run-0", "restart_number": 1})]
    )


def test_a_used_run_id_is_refused_before_the_status_is_checked() -> None:
    when_creating(created("run-2"), status="done").then_raises(
        RunAlreadyExistsError, "Workflow run already exists: run-2"
    )


def test_the_status_is_checked_before_the_parent_is_looked_up() -> None:
    when_creating(parent_run_id="missing", status="done").then_raises(
        InvalidRunFieldError, "Workflow run status must be queued, running or waiting"
    )


def test_a_missing_parent_is_refused_before_the_runs_own_fields() -> None:
    when_creating(parent_run_id="missing", workflow_name="").then_raises(
        ParentRunMissingError, "Workflow parent run is missing: missing"
    )


def test_a_parent_id_that_is_not_text_names_no_parent() -> None:
    when_creating(parent_run_id=5).then_raises(
        ParentRunMissingError, "Workflow parent run is missing: 5"
    )


def test_the_runs_own_fields_are_checked_last() -> None:
    when_creating(workflow_name=" ").then_raises(
        InvalidWorkflowNameError, "Workflow name must be a non-empty string"
    )


def test_ancestors_follow_every_link_and_the_continuation_chain_stops_at_a_restart() -> None:
    steps = (
        created("run-0"),
        restart_child("run-1", parent_run_id="run-0"),
        created("run-2", parent_run_id="run-1"),
        created("run-3", parent_run_id="run-2"),
    )

    def walks(aggregates: Any) -> tuple[list[str], list[str]]:
        run = aggregates.run("run-3")
        return (
            [r.run_id for r in ancestors(run, aggregates)],
            [r.run_id for r in continuation_chain(run, aggregates)],
        )

    outcome = given_events(history_of(*steps)).when(walks)
    outcome.then([])
    assert outcome.result == (["run-2", "run-1", "run-0"], ["run-3", "run-2", "run-1"])


def test_the_continuation_chain_stops_after_its_step_limit() -> None:
    steps = (
        created("run-0"),
        created("run-1", parent_run_id="run-0"),
        created("run-2", parent_run_id="run-1"),
    )

    outcome = given_events(history_of(*steps)).when(
        lambda aggregates: [
            r.run_id for r in continuation_chain(aggregates.run("run-2"), aggregates, max_steps=1)
        ]
    )

    outcome.then([])
    assert outcome.result == ["run-2", "run-1"]
