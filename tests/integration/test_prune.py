"""Retention's prune on every backend: settled trees archived to verified bundles and removed
from the log and every read model in one transaction, leaving a tombstone; what stays is
what a rebuild of the remaining log gives."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runledger.domain.errors import RunArchivedError, RunNotFoundError
from runledger.domain.records import PruneReport
from runledger.infrastructure import verify_bundle
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import (
    HUMAN,
    IC,
    SESSION,
    deliver,
    follow_up_message,
    present_terminal,
    queued_id,
    running_run,
)
from tests.support.sessions import session_binding, session_capture, session_events

LATER = datetime(2027, 1, 1, tzinfo=UTC)
DECISION_REQUEST = {"title": "Ship the release?", "choices": ["ship", "hold"]}


def finished(store: WorkflowStore, run_id: str, **create: object) -> None:
    store.create_run(run_id, workflow_name="review", input={"n": 1}, **create)  # type: ignore[arg-type]
    store.finish_run(run_id, status="completed", final_output={"ok": True})


def prune(store: WorkflowStore, folder: Path, **options: object) -> PruneReport:
    return store.prune_runs(settled_before=LATER, archive=folder, **options)  # type: ignore[arg-type]


def digests(store: WorkflowStore) -> dict[str, str]:
    return {name: store.read_model_digest(name) for name in store.projection_names()}


def test_a_settled_tree_is_archived_and_removed_leaving_its_tombstone(
    store: WorkflowStore, runtime: StoreRuntime, tmp_path: Path
) -> None:
    finished(store, "root")
    finished(store, "child", parent_run_id="root")
    store.create_run("live", workflow_name="review", input={})
    events = len(store.event_log(run_id="root")) + len(store.event_log(run_id="child"))

    report = prune(store, tmp_path)

    [archived] = report.archived
    assert (archived.root_run_id, archived.run_ids, archived.events) == (
        "root",
        ["root", "child"],
        events,
    )
    assert [(tree.root_run_id, tree.reason) for tree in report.kept] == [("live", "run-not-ended")]
    assert (report.trees, report.runs, report.events, report.dry_run) == (1, 2, events, False)
    bundle = Path(archived.bundle)
    assert hashlib.sha256(bundle.read_bytes()).hexdigest() == archived.bundle_sha256
    assert verify_bundle(bundle).ok
    # The log keeps only the tombstone of the tree, under its root.
    [tombstone] = store.event_log(run_id="root")
    assert tombstone.wire_name == "run-tree.archived"
    assert store.event_log(run_id="child") == []
    with pytest.raises(RunArchivedError) as raised:
        store.get_run("child")
    assert raised.value.bundle_sha256 == archived.bundle_sha256
    assert isinstance(raised.value, RunNotFoundError)
    assert [run.run_id for run in store.list_runs().runs] == ["live"]
    assert store.get_run("live") is not None


def test_a_dry_run_writes_nothing_and_says_what_would_go(
    store: WorkflowStore, tmp_path: Path
) -> None:
    finished(store, "root")
    store.create_run("live", workflow_name="review", input={})
    log = store.event_log()

    report = prune(store, tmp_path, dry_run=True)

    assert report.dry_run
    assert [(tree.root_run_id, tree.run_ids) for tree in report.prunable] == [("root", ["root"])]
    assert report.archived == []
    assert [tree.reason for tree in report.kept] == ["run-not-ended"]
    assert list(tmp_path.iterdir()) == []
    assert store.event_log() == log


def test_after_a_prune_the_live_read_models_equal_a_rebuild(
    store: WorkflowStore, runtime: StoreRuntime, tmp_path: Path
) -> None:
    finished(store, "first")
    finished(store, "middle")
    finished(store, "middle-child", parent_run_id="middle")
    finished(store, "last")

    prune(store, tmp_path, limit=2)
    live = digests(store)
    runtime.rebuild_projections()

    assert digests(store) == live
    assert all(outcome.equal for outcome in runtime.verify_projections())


def lived(
    store: WorkflowStore, run_id: str, *, parent_run_id: str | None = None, pending: bool = False
) -> None:
    """A run of session-1 with a bit of everything: a delivered follow-up, settings and a
    change, an answered decision, an applied effect, a recorded session, then its end with
    the terminal message presented."""
    running_run(store, run_id, parent_run_id=parent_run_id)
    follow_up = queued_id(store, f"{run_id}-ask", run_id=run_id)
    deliver(store, follow_up_message(store, follow_up).workflow_message_id, f"entry-{run_id}")
    scope = store.ensure_settings_scope(
        run_id,
        settings={"notes": []},
        policy={"rules": [{"path": "/notes", "permissions": {"human": ["add"]}}]},
    )
    store.change_settings(
        run_id,
        scope.scope_id,
        request_id=f"{run_id}-note",
        actor=HUMAN,
        source=IC,
        patch=[{"op": "add", "path": "/notes/-", "value": run_id}],
    )
    store.record_progress(run_id, status="waiting", current_attempt_id="attempt-1")
    decision = store.request_human_decision(
        run_id, node_id="approve", attempt_id="attempt-1", request=DECISION_REQUEST
    )
    store.answer_human_decision(
        decision.decision_id,
        actor=HUMAN,
        response={"choice": "ship"},
        submission_id=f"{run_id}-answer",
    )
    store.record_progress(run_id, status="running", current_node="apply")
    reservation = store.reserve_effect(
        run_id, effect_type="http", key="charge", request={"amount": 3}
    )
    store.settle_effect(
        reservation.effect.effect_id, attempt=reservation.effect.attempt, outcome="applied"
    )
    store.record_session_binding(run_id, session_binding(run_id, f"pi-{run_id}"))
    store.append_session_events(run_id, session_events(1, 3))
    store.update_session_capture(run_id, session_capture("complete", 0, 3))
    if pending:
        queued_id(store, f"{run_id}-pending", run_id=run_id)
    store.finish_run(run_id, status="completed", final_output={"ok": run_id})
    present_terminal(store, run_id)


def test_pruning_a_tree_between_others_of_one_session_leaves_what_a_rebuild_gives(
    store: WorkflowStore, runtime: StoreRuntime, tmp_path: Path
) -> None:
    lived(store, "before", pending=True)  # its queued follow-up keeps it
    lived(store, "middle")
    lived(store, "middle-child", parent_run_id="middle")
    running_run(store, "after")
    queued_id(store, "after-ask", run_id="after")

    report = prune(store, tmp_path)

    assert [tree.root_run_id for tree in report.archived] == ["middle"]
    # What comes after the prune is numbered on from the closed-up session order.
    queued_id(store, "after-more", run_id="after")
    orders = [message.order for message in store.session_outbox(SESSION)]
    assert orders == list(range(1, len(orders) + 1))
    live = digests(store)
    assert all(outcome.equal for outcome in runtime.verify_projections())
    runtime.rebuild_projections()
    assert digests(store) == live
