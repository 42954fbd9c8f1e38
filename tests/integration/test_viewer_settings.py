"""Upstream §7.3 and I1 with DESIGN decision 24: the viewer's inspector ``settings`` target,
recorded as delta 0 before ``follow-ups`` on every scope creation, accepted change and
hand-over (the parent's too), on every backend."""

from __future__ import annotations

from typing import Any, Final

from runledger.domain.canonical import json_digest
from runledger.domain.records import ViewerDelta, ViewerDeltas
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import HUMAN, IC, RUN, create, queue, running_run

CHILD: Final = "run-1-continued"
POLICY: Final = {"rules": [{"path": "", "permissions": {"human": ["read", "replace"]}}]}


def latest(store: WorkflowStore, run_id: str = RUN) -> list[ViewerDelta]:
    """The deltas of the run's newest revision."""
    current = store.viewer_deltas(run_id, after_revision=1).current_revision
    result = store.viewer_deltas(run_id, after_revision=current - 1)
    assert isinstance(result, ViewerDeltas)
    return result.deltas


def targets(deltas: list[ViewerDelta]) -> list[tuple[int, str, str]]:
    return [(d.delta_index, d.target_type, d.target_key) for d in deltas]


def item(scope_id: str, mount_path: str, change_number: int, settings: Any) -> dict[str, Any]:
    return {
        "scopeId": scope_id,
        "mountPath": mount_path,
        "invocation": 1,
        "changeNumber": change_number,
        "settingsHash": json_digest(settings),
    }


def settings_ops(revision: int, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {"op": "replace", "path": "/presentationRevision", "value": revision},
        {"op": "replace", "path": "/settingsScopes", "value": items},
        {"op": "replace", "path": "/settingsStart", "value": 0},
        {"op": "replace", "path": "/settingsTotal", "value": len(items)},
    ]


def ensure(store: WorkflowStore, mount_path: str = "", settings: Any = None) -> str:
    return store.ensure_settings_scope(
        RUN, mount_path=mount_path, settings=settings or {"mode": "a"}, policy=POLICY
    ).scope_id


def test_a_new_scope_records_the_settings_target_before_the_follow_ups_target(
    store: WorkflowStore,
) -> None:
    running_run(store)

    scope_id = ensure(store)

    settings, follow_ups = latest(store)
    assert targets([settings, follow_ups]) == [
        (0, "inspector", "settings"),
        (1, "inspector", "follow-ups"),
    ]
    revision = settings.presentation_revision
    assert settings.patch == settings_ops(revision, [item(scope_id, "", 0, {"mode": "a"})])
    assert follow_ups.patch[1:] == [
        {"op": "replace", "path": "/followUpQueue", "value": {"items": []}},
        {"op": "replace", "path": "/followUpStart", "value": 0},
        {"op": "replace", "path": "/followUpTotal", "value": 0},
    ]


def test_scopes_are_listed_by_mount_path(store: WorkflowStore) -> None:
    running_run(store)
    second = ensure(store, "second")
    first = ensure(store, "first")

    [settings, _] = latest(store)

    assert [scope["scopeId"] for scope in settings.patch[1]["value"]] == [first, second]


def test_an_accepted_change_shows_its_change_number_and_hash(store: WorkflowStore) -> None:
    running_run(store)
    scope_id = ensure(store)

    store.change_settings(
        RUN,
        scope_id,
        request_id="change-1",
        actor=HUMAN,
        source=IC,
        patch=[{"op": "replace", "path": "/mode", "value": "b"}],
    )

    [settings, _] = latest(store)
    assert settings.patch[1]["value"] == [item(scope_id, "", 1, {"mode": "b"})]


def test_a_follow_up_revision_carries_the_runs_settings_too(store: WorkflowStore) -> None:
    running_run(store)
    scope_id = ensure(store)

    queue(store)

    settings, follow_ups = latest(store)
    assert settings.patch[1]["value"] == [item(scope_id, "", 0, {"mode": "a"})]
    assert follow_ups.patch[-1] == {"op": "replace", "path": "/followUpTotal", "value": 1}


def test_the_hand_over_shows_the_scope_on_the_child_and_gone_from_the_parent(
    store: WorkflowStore,
) -> None:
    running_run(store)
    scope_id = ensure(store)

    create(store, CHILD, parent_run_id=RUN)

    [parent_settings, _] = latest(store, RUN)
    [child_settings, _] = latest(store, CHILD)
    assert parent_settings.patch[1:] == settings_ops(0, [])[1:]
    assert child_settings.patch[1]["value"] == [item(scope_id, "", 0, {"mode": "a"})]
    assert child_settings.presentation_revision == 2
