"""The settings rules that span a run and its scopes (upstream §3.6, §9.1-9.2; decisions 4,
15 and 19), as given/when/then specifications over several aggregates."""

from __future__ import annotations

from typing import Any

from runledger.domain import lineage
from runledger.domain.errors import (
    ContinuationChainTooDeepError,
    RunNotAcceptingChangesError,
    SettingsScopeNotActiveError,
)
from runledger.domain.values import HOST
from tests.support.specification import Then, given_events, history_of
from tests.support.steps import (
    INPUT,
    NOW,
    Step,
    created,
    ended,
    mode_changed,
    restart_child,
    scoped,
)

ROOT_SCOPE = "run-1:$root:1"


def when_creating(*steps: Step, run_id: str = "run-2", parent_run_id: str = "run-1") -> Then[Any]:
    return given_events(history_of(*steps)).when(
        lambda aggregates: lineage.create_run(
            aggregates,
            run_id,
            workflow_name="echo",
            input=INPUT,
            workflow_ref=None,
            title=None,
            parent_run_id=parent_run_id,
            status="running",
            actor=HOST,
            now=NOW,
        )
    )


def chain(length: int) -> list[Step]:
    """run-0 and ``length`` continuation descendants, each the child of the one before."""
    return [
        created("run-0"),
        *(created(f"run-{n}", parent_run_id=f"run-{n - 1}") for n in range(1, length + 1)),
    ]


# -- the hand-over (§3.6, decision 4) ---------------------------------------------------------


def test_a_continuation_child_takes_every_scope_active_on_its_parent() -> None:
    when_creating(created("run-1"), scoped(), scoped(mount_path="first")).then(
        [
            ("run.created", {"run_id": "run-2", "lineage_kind": "continuation"}),
            ("settings.scope-moved", {"scope_id": ROOT_SCOPE, "from_run_id": "run-1"}),
            ("settings.scope-moved", {"scope_id": "run-1:first:1", "run_id": "run-2"}),
        ]
    )


def test_a_scope_that_moved_on_stays_with_the_run_it_moved_to() -> None:
    steps = (created("run-1"), scoped(), created("run-2", parent_run_id="run-1"))

    when_creating(*steps, run_id="run-3").then([("run.created", {"run_id": "run-3"})])


def test_a_root_run_takes_no_scope() -> None:
    given_events(history_of(created("run-1"), scoped())).when(created("run-2")).then(
        [("run.created", {"run_id": "run-2"}), ("run.session-bound", {"run_id": "run-2"})]
    )


# -- the origin of a scope (decision 19) -------------------------------------------------------


def test_a_continuations_scope_is_named_by_the_top_of_its_chain() -> None:
    steps = (created("run-1"), created("run-2", parent_run_id="run-1"))
    given_events(history_of(*steps, created("run-3", parent_run_id="run-2"))).when(
        scoped("run-3", mount_path="first")
    ).then(
        [
            (
                "settings.scope-created",
                {"scope_id": "run-1:first:1", "origin_run_id": "run-1", "run_id": "run-3"},
            )
        ]
    )


def test_a_restart_child_is_the_origin_of_its_own_scopes() -> None:
    steps = (created("run-1"), ended("run-1"), restart_child("run-2", parent_run_id="run-1"))

    given_events(history_of(*steps)).when(scoped("run-2")).then(
        [("settings.scope-created", {"scope_id": "run-2:$root:1", "origin_run_id": "run-2"})]
    )


def test_the_origin_is_found_within_100_steps() -> None:
    given_events(history_of(*chain(100))).when(scoped("run-100")).then(
        [("settings.scope-created", {"origin_run_id": "run-0"})]
    )


def test_a_chain_deeper_than_100_steps_has_no_origin() -> None:
    given_events(history_of(*chain(101))).when(scoped("run-101")).then_raises(
        ContinuationChainTooDeepError, "Workflow continuation chain is too deep for run run-101"
    )


# -- changes (§9.2 step 2, in order) ----------------------------------------------------------


def test_a_change_is_recorded_on_the_run_the_scope_is_active_on() -> None:
    given_events(history_of(created("run-1"), scoped())).when(
        mode_changed("run-1", ROOT_SCOPE)
    ).then([("settings.changed", {"run_id": "run-1", "change_number": 1})])


def test_a_retry_is_adopted_before_the_scope_is_found_to_have_moved_on() -> None:
    steps = (
        created("run-1"),
        scoped(),
        mode_changed("run-1", ROOT_SCOPE),
        created("run-2", parent_run_id="run-1"),
    )

    outcome = given_events(history_of(*steps)).when(mode_changed("run-1", ROOT_SCOPE))

    outcome.then([])
    answer: Any = outcome.result
    assert answer.adopted is True


def test_a_change_through_a_run_the_scope_moved_away_from_is_refused() -> None:
    steps = (created("run-1"), scoped(), created("run-2", parent_run_id="run-1"))

    given_events(history_of(*steps)).when(mode_changed("run-1", ROOT_SCOPE)).then_raises(
        SettingsScopeNotActiveError, "Workflow settings scope is not active for run run-1"
    )


def test_a_change_on_an_ended_run_is_refused_after_the_scope_is_found_active() -> None:
    steps = (created("run-1"), scoped(), ended("run-1", "completed"))

    given_events(history_of(*steps)).when(mode_changed("run-1", ROOT_SCOPE)).then_raises(
        RunNotAcceptingChangesError,
        "Workflow run run-1 does not accept changes with status completed",
    )
