"""Upstream §3.5 B (reserved runs), §3.6 (hand-over), §9.1-9.2 and §11 J (settings), on every
backend. Scenario numbers follow upstream-behaviour.md §11; J4 and J6 are out of scope
(DESIGN decision 14).
"""

from __future__ import annotations

from typing import Any, Final

import pytest

from runledger.domain.canonical import json_digest
from runledger.domain.errors import (
    ContinuationChainTooDeepError,
    InvalidRequestIdError,
    InvalidSettingsChangeNumberError,
    InvalidSettingsInvocationError,
    InvalidSettingsPatchError,
    InvalidSettingsPolicyError,
    InvalidSourceError,
    NotPlainJsonError,
    RunMissingError,
    RunNotAcceptingChangesError,
    SettingsChangeMissingError,
    SettingsPermissionError,
    SettingsRequestReusedError,
    SettingsScopeNotActiveError,
    SettingsScopeNotFoundError,
    SettingsScopeOfAnotherRunError,
    SettingsTooLargeError,
    StaleSettingsError,
)
from runledger.domain.records import SettingsChange, SettingsScopeRecord
from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import assert_rejected, recording, writes_nothing
from tests.support.scenario import (
    HUMAN,
    IC,
    RUN,
    SESSION,
    SESSION_ACTOR,
    WT,
    create,
    queue,
    restart,
    running_run,
    waiting_run,
)

ROOT_SCOPE: Final = f"{RUN}:$root:1"
CHILD: Final = "run-1-continued"
POLICY: Final[dict[str, Any]] = {
    "rules": [
        {"path": "/mode", "permissions": {"human": ["read", "replace"], "session": ["read"]}},
        {"path": "/notes", "permissions": {"human": ["read", "add"], "session": ["read", "add"]}},
        {"path": "/merge", "permissions": {"human": ["replace"], "session": ["read"]}},
        {"path": "/secret", "permissions": {"human": ["read"]}},
    ],
    "max_bytes": 256,
}
SETTINGS: Final[dict[str, Any]] = {"mode": "a", "notes": [], "merge": "auto", "secret": "s"}
EVERYTHING: Final = ("read", "add", "replace", "remove")


def not_accepting(run_id: str, status: str) -> str:
    return f"Workflow run {run_id} does not accept changes with status {status}"


def scope(
    store: WorkflowStore,
    run_id: str = RUN,
    *,
    mount_path: str = "",
    invocation: int = 1,
    settings: Any = None,
    policy: dict[str, Any] | None = None,
) -> SettingsScopeRecord:
    return store.ensure_settings_scope(
        run_id,
        mount_path=mount_path,
        invocation=invocation,
        settings=SETTINGS if settings is None else settings,
        policy=POLICY if policy is None else policy,
    )


def change(
    store: WorkflowStore,
    patch: list[dict[str, Any]],
    request_id: str = "change-1",
    *,
    run_id: str = RUN,
    scope_id: str = ROOT_SCOPE,
    actor: Actor = HUMAN,
    source: str = IC,
    expected: int | None = None,
) -> SettingsChange:
    return store.change_settings(
        run_id,
        scope_id,
        request_id=request_id,
        actor=actor,
        source=source,
        patch=patch,
        expected_change_number=expected,
    )


def replace_mode(value: str = "b") -> list[dict[str, Any]]:
    return [{"op": "replace", "path": "/mode", "value": value}]


def add_note(value: str) -> list[dict[str, Any]]:
    return [{"op": "add", "path": "/notes/-", "value": value}]


@pytest.fixture
def scoped(store: WorkflowStore) -> WorkflowStore:
    """R with its root settings scope."""
    running_run(store)
    scope(store)
    return store


# -- reserved runs (§3.5 B, decision 13) ---------------------------------------------------------


def test_a_reserved_run_is_created_queued(store: WorkflowStore) -> None:
    with recording(store) as recorded:
        run = create(store, status="queued")

    assert run.status == "queued"
    assert recorded.events[0].payload["status"] == "queued"


def test_a_reserved_run_refuses_follow_ups(store: WorkflowStore) -> None:
    create(store, status="queued")
    store.bind_origin_session(RUN, SESSION)

    assert_rejected(store, RunNotAcceptingChangesError, not_accepting(RUN, "queued"), queue, store)


def test_a_reserved_run_refuses_a_settings_scope(store: WorkflowStore) -> None:
    create(store, status="queued")

    assert_rejected(store, RunNotAcceptingChangesError, not_accepting(RUN, "queued"), scope, store)


def test_a_reserved_run_has_no_terminal_data(store: WorkflowStore) -> None:
    create(store, status="queued")

    assert store.terminal_data(RUN) is None


def test_progress_to_running_starts_a_reserved_run(store: WorkflowStore) -> None:
    create(store, status="queued")
    store.bind_origin_session(RUN, SESSION)

    started = store.record_progress(RUN, status="running", current_node="first")

    assert (started.status, started.current_node) == ("running", "first")
    assert queue(store).follow_up.order == 1


# -- J1: scope ids -------------------------------------------------------------------------------


def test_j1_the_root_scope_id_names_the_run_and_root_mount(scoped: WorkflowStore) -> None:
    [root] = scoped.settings_scopes(RUN)

    assert root.scope_id == "run-1:$root:1"
    assert (root.origin_run_id, root.active_run_id) == (RUN, RUN)


def test_j1_a_mounted_scope_id_names_its_mount_path_and_invocation(store: WorkflowStore) -> None:
    running_run(store)

    assert scope(store, mount_path="child", invocation=2).scope_id == "run-1:child:2"


@pytest.mark.parametrize("invocation", [0, -1, 1.5, True, "1"])
def test_j1_an_invocation_that_is_not_a_positive_integer_is_rejected(
    store: WorkflowStore, invocation: Any
) -> None:
    running_run(store)

    assert_rejected(
        store,
        InvalidSettingsInvocationError,
        "Workflow settings invocation must be a positive integer",
        scope,
        store,
        invocation=invocation,
    )


def test_j1_a_continuation_shares_the_origin_runs_scope_ids(scoped: WorkflowStore) -> None:
    running_run(scoped, CHILD, parent_run_id=RUN)

    mounted = scope(scoped, CHILD, mount_path="first")

    assert mounted.scope_id == "run-1:first:1"
    assert mounted.origin_run_id == RUN


def test_a_restart_child_is_the_origin_of_its_own_scopes(store: WorkflowStore) -> None:
    running_run(store)
    store.finish_run(RUN, status="failed", error="boom")
    child = restart(store).run_id
    store.record_progress(child, status="running", current_node="hold")

    assert scope(store, child).scope_id == f"{child}:$root:1"


def test_a_continuation_chain_deeper_than_100_runs_has_no_settings_origin(
    store: WorkflowStore,
) -> None:
    create(store, "run-0")
    for depth in range(1, 102):
        create(store, f"run-{depth}", parent_run_id=f"run-{depth - 1}")
    scope(store, "run-100")

    assert_rejected(
        store,
        ContinuationChainTooDeepError,
        "Workflow continuation chain is too deep for run run-101",
        scope,
        store,
        "run-101",
    )


# -- §9.1 ensure_settings_scope ------------------------------------------------------------------


def test_ensuring_a_scope_records_its_initial_value_and_policy(store: WorkflowStore) -> None:
    running_run(store)

    with recording(store) as recorded:
        created = scope(store)

    assert recorded.wire_names == ["settings.scope-created"]
    assert (created.change_number, created.settings) == (0, SETTINGS)
    assert created.settings_hash == json_digest(SETTINGS)
    assert recorded.events[0].payload["policy"] == POLICY


def test_ensuring_an_existing_scope_of_the_run_returns_it_unchanged(scoped: WorkflowStore) -> None:
    change(scoped, replace_mode())

    with recording(scoped) as recorded:
        again = scope(scoped, settings={"mode": "ignored"})

    assert recorded.wire_names == []
    assert (again.change_number, again.settings["mode"]) == (1, "b")


def test_ensuring_a_scope_on_a_waiting_run_is_rejected(store: WorkflowStore) -> None:
    waiting_run(store)

    assert_rejected(store, RunNotAcceptingChangesError, not_accepting(RUN, "waiting"), scope, store)


def test_ensuring_a_scope_on_a_missing_run_is_rejected(store: WorkflowStore) -> None:
    assert_rejected(store, RunMissingError, "Workflow run is missing: run-1", scope, store)


def test_ensuring_a_scope_that_moved_to_a_continuation_is_rejected_for_the_parent(
    scoped: WorkflowStore,
) -> None:
    create(scoped, CHILD, parent_run_id=RUN)

    assert_rejected(
        scoped,
        SettingsScopeOfAnotherRunError,
        "Workflow settings scope belongs to another active run: run-1:$root:1",
        scope,
        scoped,
    )


def test_initial_settings_over_the_size_limit_are_rejected(store: WorkflowStore) -> None:
    running_run(store)

    assert_rejected(
        store,
        SettingsTooLargeError,
        "Workflow settings cannot exceed 256 bytes",
        scope,
        store,
        settings={"notes": ["x" * 300]},
    )


@pytest.mark.parametrize(
    ("policy", "problem"),
    [
        ("read everything", "it must be an object with rules and max_bytes"),
        ({"rules": {}}, "rules must be a list"),
        ({"rules": [], "max_bytes": 0}, "max_bytes must be a positive integer"),
        ({"rules": [], "limit": 5}, "unknown fields ['limit']"),
        (
            {"rules": [{"path": "mode", "permissions": {}}]},
            "rule path 'mode' is not a JSON pointer",
        ),
        (
            {"rules": [{"path": "/a", "permissions": {"robot": ["read"]}}]},
            "unknown actor type 'robot'",
        ),
        (
            {"rules": [{"path": "/a", "permissions": {"human": ["write"]}}]},
            "permissions of '/a' for human must be a list of read, add, replace, remove",
        ),
        (
            {"rules": [{"path": "/a", "permissions": {}}, {"path": "/a", "permissions": {}}]},
            "two rules name the path '/a'",
        ),
    ],
    ids=["not-object", "rules", "max-bytes", "unknown", "pointer", "actor", "permission", "dup"],
)
def test_a_malformed_policy_is_rejected_naming_the_problem(
    store: WorkflowStore, policy: Any, problem: str
) -> None:
    running_run(store)

    assert_rejected(
        store,
        InvalidSettingsPolicyError,
        f"Workflow settings policy is invalid: {problem}",
        scope,
        store,
        policy=policy,
    )


# -- J7: isolated scopes per included-workflow invocation ----------------------------------------


def test_j7_each_included_workflow_invocation_has_its_own_scope(store: WorkflowStore) -> None:
    running_run(store)
    scope(store, mount_path="second", settings={"value": "two"})
    scope(store, mount_path="first", settings={"value": "mapped-one"})

    listed = [
        {"mountPath": s.mount_path, "invocation": s.invocation, "settings": s.settings}
        for s in store.settings_scopes(RUN)
    ]

    assert listed == [
        {"mountPath": "first", "invocation": 1, "settings": {"value": "mapped-one"}},
        {"mountPath": "second", "invocation": 1, "settings": {"value": "two"}},
    ]


# -- J2: changes, retries and request reuse ------------------------------------------------------


def test_j2_a_human_change_with_the_expected_number_is_change_1(scoped: WorkflowStore) -> None:
    with recording(scoped) as recorded:
        changed = change(scoped, replace_mode(), expected=0)

    assert (changed.adopted, changed.change.change_number) == (False, 1)
    assert changed.scope.settings == {**SETTINGS, "mode": "b"}
    [event] = recorded.events
    assert event.wire_name == "settings.changed"
    assert event.actor == Actor("human", "user-1")
    assert event.payload["before_hash"] == json_digest(SETTINGS)
    assert event.payload["after_hash"] == json_digest({**SETTINGS, "mode": "b"})


def test_j2_an_identical_retry_is_adopted_and_writes_nothing(scoped: WorkflowStore) -> None:
    first = change(scoped, replace_mode(), expected=0)

    with recording(scoped) as recorded:
        retry = change(scoped, replace_mode(), expected=0)

    assert recorded.wire_names == []
    assert retry.adopted is True
    assert retry.change == first.change


def test_j2_a_request_id_reused_with_another_patch_is_rejected(scoped: WorkflowStore) -> None:
    change(scoped, replace_mode())

    assert_rejected(
        scoped,
        SettingsRequestReusedError,
        "Workflow settings request ID was reused with different content",
        change,
        scoped,
        replace_mode("c"),
    )


@pytest.mark.parametrize(
    "other",
    [{"actor": Actor("human", "user-2")}, {"source": "viewer"}],
    ids=["actor", "source"],
)
def test_j2_a_request_id_reused_by_another_actor_or_source_is_rejected(
    scoped: WorkflowStore, other: dict[str, Any]
) -> None:
    change(scoped, replace_mode())

    assert_rejected(
        scoped,
        SettingsRequestReusedError,
        "Workflow settings request ID was reused with different content",
        change,
        scoped,
        replace_mode(),
        **other,
    )


def test_a_stale_expected_change_number_is_rejected(scoped: WorkflowStore) -> None:
    change(scoped, replace_mode())

    assert_rejected(
        scoped,
        StaleSettingsError,
        "Workflow settings changed: expected 0, current 1",
        change,
        scoped,
        add_note("late"),
        "change-2",
        expected=0,
    )


# -- §9.2 step order and the not-found / not-active / status rules -------------------------------


def test_the_request_id_is_checked_first(scoped: WorkflowStore) -> None:
    assert_rejected(
        scoped,
        InvalidRequestIdError,
        "Workflow request ID must be a stable identifier of at most 512 characters",
        change,
        scoped,
        "not a patch",
        " bad id",
        source="",
    )


def test_the_source_is_checked_before_the_patch(scoped: WorkflowStore) -> None:
    assert_rejected(
        scoped,
        InvalidSourceError,
        "Workflow change source must be a non-empty string of at most 128 characters",
        change,
        scoped,
        "not a patch",
        source=" ",
    )


def test_an_adopted_retry_is_answered_even_after_the_run_ended(scoped: WorkflowStore) -> None:
    change(scoped, replace_mode())
    scoped.finish_run(RUN, status="completed")

    assert change(scoped, replace_mode()).adopted is True


def test_a_change_to_an_unknown_scope_is_rejected(scoped: WorkflowStore) -> None:
    assert_rejected(
        scoped,
        SettingsScopeNotFoundError,
        "Workflow settings scope not found: run-1:other:1",
        change,
        scoped,
        replace_mode(),
        scope_id="run-1:other:1",
    )


def test_a_change_through_a_run_the_scope_is_not_active_on_is_rejected(
    scoped: WorkflowStore,
) -> None:
    create(scoped, CHILD, parent_run_id=RUN)

    assert_rejected(
        scoped,
        SettingsScopeNotActiveError,
        "Workflow settings scope is not active for run run-1",
        change,
        scoped,
        replace_mode(),
    )


def test_a_change_on_an_ended_run_is_rejected(scoped: WorkflowStore) -> None:
    scoped.finish_run(RUN, status="completed")

    assert_rejected(
        scoped,
        RunNotAcceptingChangesError,
        not_accepting(RUN, "completed"),
        change,
        scoped,
        replace_mode(),
    )


def test_a_change_on_a_waiting_run_is_accepted(store: WorkflowStore) -> None:
    running_run(store)
    scope(store)
    store.record_progress(RUN, status="waiting", waiting_on="ask")

    assert change(store, replace_mode()).change.change_number == 1


# -- J5 and the per-operation permissions ----------------------------------------------------------


def test_j5_a_session_may_not_replace_what_only_a_human_may(scoped: WorkflowStore) -> None:
    assert_rejected(
        scoped,
        SettingsPermissionError,
        'Workflow settings replace is not allowed at "/merge" for actor session',
        change,
        scoped,
        [{"op": "replace", "path": "/merge", "value": "manual"}],
        actor=SESSION_ACTOR,
        source=WT,
    )


def test_j5_a_path_no_rule_covers_is_refused(scoped: WorkflowStore) -> None:
    assert_rejected(
        scoped,
        SettingsPermissionError,
        'Workflow settings add is not allowed at "/unknown" for actor human',
        change,
        scoped,
        [{"op": "add", "path": "/unknown", "value": 1}],
    )


@pytest.mark.parametrize(
    ("operation", "permission", "path"),
    [
        ({"op": "test", "path": "/secret", "value": "s"}, "read", "/secret"),
        ({"op": "add", "path": "/mode", "value": "c"}, "replace", "/mode"),
        ({"op": "remove", "path": "/notes"}, "remove", "/notes"),
        ({"op": "copy", "from": "/secret", "path": "/notes/-"}, "read", "/secret"),
        ({"op": "move", "from": "/notes", "path": "/mode"}, "remove", "/notes"),
        ({"op": "copy", "from": "/notes", "path": "/mode"}, "replace", "/mode"),
    ],
    ids=["test-read", "add-existing", "remove", "copy-read", "move-remove", "copy-dest"],
)
def test_each_operation_needs_its_permissions(
    scoped: WorkflowStore, operation: dict[str, Any], permission: str, path: str
) -> None:
    assert_rejected(
        scoped,
        SettingsPermissionError,
        f'Workflow settings {permission} is not allowed at "{path}" for actor session',
        change,
        scoped,
        [operation],
        actor=SESSION_ACTOR,
        source=WT,
    )


def test_a_session_may_add_a_note_and_copy_what_it_may_read(scoped: WorkflowStore) -> None:
    changed = change(
        scoped,
        [
            {"op": "test", "path": "/mode", "value": "a"},
            {"op": "add", "path": "/notes/-", "value": "one"},
            {"op": "copy", "from": "/mode", "path": "/notes/-"},
        ],
        actor=SESSION_ACTOR,
        source=WT,
    )

    assert changed.scope.settings["notes"] == ["one", "a"]


def test_the_most_specific_rule_on_segment_boundaries_decides(store: WorkflowStore) -> None:
    running_run(store)
    policy = {
        "rules": [
            {"path": "", "permissions": {"session": ["read", "add", "replace"]}},
            {"path": "/notes", "permissions": {"session": ["read"]}},
        ]
    }
    scope(store, settings={"notes": [], "notesx": []}, policy=policy)

    accepted = change(
        store, [{"op": "add", "path": "/notesx/-", "value": 1}], actor=SESSION_ACTOR, source=WT
    )
    assert accepted.scope.settings["notesx"] == [1]
    assert_rejected(
        store,
        SettingsPermissionError,
        'Workflow settings add is not allowed at "/notes/-" for actor session',
        change,
        store,
        add_note("x"),
        "change-2",
        actor=SESSION_ACTOR,
        source=WT,
    )


def test_a_change_that_makes_the_settings_too_large_is_rejected(scoped: WorkflowStore) -> None:
    assert_rejected(
        scoped,
        SettingsTooLargeError,
        "Workflow settings cannot exceed 256 bytes",
        change,
        scoped,
        add_note("x" * 256),
    )


@pytest.mark.parametrize(
    ("patch", "problem"),
    [
        ({"op": "replace", "path": "/mode", "value": "b"}, "it must be a non-empty list"),
        ([], "it must be a non-empty list"),
        (["replace /mode"], "operation 0 is not an object"),
        ([{"op": "merge", "path": "/mode"}], "operation 0 has no RFC 6902 op: 'merge'"),
        ([{"op": "replace", "path": "mode", "value": 1}], "operation 0 path 'mode' is not a"),
        ([{"op": "replace", "path": None, "value": 1}], "operation 0 path None is not a"),
        ([{"op": "move", "path": "/mode"}], "operation 0 from None is not a JSON pointer"),
        ([{"op": "add", "path": "/mode"}], "operation 0 (add) has no value"),
        ([{"op": "test", "path": "/mode", "value": "z"}], "not equal"),
        ([{"op": "remove", "path": "/notes/7"}], "can't remove"),
    ],
    ids=["object", "empty", "text", "op", "pointer", "none", "from", "value", "test", "missing"],
)
def test_a_patch_that_is_not_valid_rfc_6902_is_rejected_naming_the_problem(
    store: WorkflowStore, patch: Any, problem: str
) -> None:
    running_run(store)
    scope(store, policy={"rules": [{"path": "", "permissions": {"human": list(EVERYTHING)}}]})

    with writes_nothing(store), pytest.raises(InvalidSettingsPatchError) as caught:
        change(store, patch)

    assert str(caught.value).startswith("Workflow settings patch is invalid: ")
    assert problem in str(caught.value)


def test_a_patch_value_that_is_not_plain_json_is_rejected(scoped: WorkflowStore) -> None:
    assert_rejected(
        scoped,
        NotPlainJsonError,
        "Only plain objects can be stored as canonical JSON (patch[0].value is a set)",
        change,
        scoped,
        [{"op": "replace", "path": "/mode", "value": {1, 2}}],
    )


# -- §9.1 settings_scope_at_change ----------------------------------------------------------------


@pytest.fixture
def changed_twice(scoped: WorkflowStore) -> WorkflowStore:
    change(scoped, replace_mode("b"), "change-1")
    change(scoped, add_note("one"), "change-2")
    return scoped


def test_the_scope_at_change_0_is_its_initial_value(changed_twice: WorkflowStore) -> None:
    initial = changed_twice.settings_scope_at_change(ROOT_SCOPE, 0)

    assert initial is not None
    assert (initial.change_number, initial.settings) == (0, SETTINGS)
    assert initial.settings_hash == json_digest(SETTINGS)


def test_the_scope_at_an_earlier_change_is_the_value_after_it(changed_twice: WorkflowStore) -> None:
    first = changed_twice.settings_scope_at_change(ROOT_SCOPE, 1)

    assert first is not None
    assert (first.change_number, first.settings) == (1, {**SETTINGS, "mode": "b"})


def test_the_scope_at_its_current_change_is_the_current_scope(
    changed_twice: WorkflowStore,
) -> None:
    [current] = changed_twice.settings_scopes(RUN)

    assert changed_twice.settings_scope_at_change(ROOT_SCOPE, 2) == current
    assert current.settings == {**SETTINGS, "mode": "b", "notes": ["one"]}


def test_a_change_beyond_the_current_one_does_not_exist(changed_twice: WorkflowStore) -> None:
    with pytest.raises(SettingsChangeMissingError) as caught:
        changed_twice.settings_scope_at_change(ROOT_SCOPE, 3)

    assert str(caught.value) == "Workflow settings change 3 does not exist for run-1:$root:1"


@pytest.mark.parametrize("number", [-1, 1.0, True, None])
def test_a_change_number_that_is_not_a_non_negative_integer_is_rejected(
    changed_twice: WorkflowStore, number: Any
) -> None:
    with pytest.raises(InvalidSettingsChangeNumberError) as caught:
        changed_twice.settings_scope_at_change(ROOT_SCOPE, number)

    assert str(caught.value) == "Workflow settings change number must be a non-negative integer"


def test_an_unknown_scope_has_no_change(store: WorkflowStore) -> None:
    assert store.settings_scope_at_change("run-1:$root:1", 0) is None


# -- §3.6 hand-over (decision 4) -------------------------------------------------------------------


def test_a_continuation_child_takes_every_scope_active_on_its_parent(
    scoped: WorkflowStore,
) -> None:
    scope(scoped, mount_path="first")

    with recording(scoped) as recorded:
        create(scoped, CHILD, parent_run_id=RUN)

    assert recorded.wire_names == ["run.created", "settings.scope-moved", "settings.scope-moved"]
    assert [s.scope_id for s in scoped.settings_scopes(CHILD)] == [ROOT_SCOPE, "run-1:first:1"]
    assert scoped.settings_scopes(RUN) == []


def test_the_hand_over_commits_with_the_child(scoped: WorkflowStore) -> None:
    with recording(scoped) as recorded:
        create(scoped, CHILD, parent_run_id=RUN)

    created, moved = recorded.events
    assert moved.position == created.position + 1
    assert moved.payload["from_run_id"] == RUN
    assert moved.payload["run_id"] == CHILD


def test_a_moved_scope_keeps_its_value_and_takes_changes_through_the_child(
    scoped: WorkflowStore,
) -> None:
    change(scoped, replace_mode())
    running_run(scoped, CHILD, parent_run_id=RUN)

    changed = change(scoped, add_note("later"), "change-2", run_id=CHILD)

    assert changed.change.change_number == 2
    assert changed.scope.settings == {**SETTINGS, "mode": "b", "notes": ["later"]}
    assert changed.scope.active_run_id == CHILD


def test_a_restart_child_takes_no_settings(store: WorkflowStore) -> None:
    running_run(store)
    scope(store)
    store.finish_run(RUN, status="failed", error="boom")

    child = restart(store).run_id

    assert store.settings_scopes(child) == []
    assert [s.scope_id for s in store.settings_scopes(RUN)] == [ROOT_SCOPE]


def test_a_continuation_after_a_human_decision_takes_the_parents_scopes(
    scoped: WorkflowStore,
) -> None:
    scoped.record_progress(RUN, status="waiting", current_attempt_id="attempt-1")
    decision = scoped.request_human_decision(
        RUN, node_id="approve", attempt_id="attempt-1", request={"title": "Ship it?"}
    )
    scoped.answer_human_decision(
        decision.decision_id, actor=HUMAN, response={}, submission_id="submission-1"
    )

    with recording(scoped) as recorded:
        child = scoped.continue_after_decision(decision.decision_id)

    assert recorded.wire_names == [
        "decision.continuation-created",
        "run.created",
        "run.session-bound",
        "settings.scope-moved",
    ]
    assert [s.scope_id for s in scoped.settings_scopes(child.run_id)] == [ROOT_SCOPE]
    assert scoped.settings_scopes(RUN) == []
