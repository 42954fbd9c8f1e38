"""Retention's prune on every backend: settled trees archived to verified bundles and removed
from the log and every read model in one transaction, leaving a tombstone; what stays is
what a rebuild of the remaining log gives."""

from __future__ import annotations

import hashlib
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runledger.domain.errors import RunArchivedError, RunNotFoundError, WorkflowError
from runledger.domain.records import PruneReport
from runledger.infrastructure import verify_bundle
from runledger.infrastructure.audit import prune as prune_module
from runledger.infrastructure.audit import retention
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore, open_store
from runledger.infrastructure.views import rebuild as rebuild_module
from tests.integration.test_tombstones import tombstone_only
from tests.support.clock import FakeClock
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


def test_every_command_on_a_pruned_run_is_refused_as_archived(
    store: WorkflowStore, tmp_path: Path
) -> None:
    finished(store, "root")
    finished(store, "child", parent_run_id="root")
    [archived] = prune(store, tmp_path).archived
    log = store.event_log()

    with pytest.raises(RunArchivedError) as raised:
        store.record_progress("child", status="running")
    assert (raised.value.run_id, raised.value.bundle) == ("child", archived.bundle)
    with pytest.raises(RunArchivedError):
        store.restart_run("root", session_id=SESSION, workflow_message_id="m")
    with pytest.raises(RunArchivedError):
        store.claim_run("root", owner_type="controller", owner_id="w", lease_ms=1000)
    assert store.event_log() == log


def test_a_pruned_run_id_is_never_given_again(store: WorkflowStore, tmp_path: Path) -> None:
    finished(store, "root")
    prune(store, tmp_path)

    with pytest.raises(RunArchivedError):
        store.create_run("root", workflow_name="review", input={})
    with pytest.raises(RunArchivedError):
        store.create_run("new-child", workflow_name="review", input={}, parent_run_id="root")
    assert [event.wire_name for event in store.event_log()] == ["run-tree.archived"]


def test_another_store_that_cached_the_tree_finds_it_archived(
    store: WorkflowStore, second_store: WorkflowStore, tmp_path: Path
) -> None:
    store.create_run("root", workflow_name="review", input={})
    # The other store caches the run as it writes it.
    second_store.finish_run("root", status="completed")

    prune(store, tmp_path)

    with pytest.raises(RunArchivedError):
        second_store.record_progress("root", status="running")
    with pytest.raises(RunArchivedError):
        second_store.create_run("root", workflow_name="review", input={})
    with pytest.raises(RunArchivedError):
        second_store.get_run("root")
    with pytest.raises(RunArchivedError):
        # Its commit rests on the parent it read from its cache: the guard refuses it.
        second_store.create_run("late", workflow_name="review", input={}, parent_run_id="root")


def test_the_event_log_pages_across_the_holes(store: WorkflowStore, tmp_path: Path) -> None:
    finished(store, "first")
    finished(store, "gone")
    finished(store, "gone-child", parent_run_id="gone")
    store.create_run("last", workflow_name="review", input={})
    store.create_run("first-child", workflow_name="review", input={}, parent_run_id="first")
    gone = ("gone", "gone-child")
    kept = [e.position for e in store.event_log() if e.payload.get("run_id") not in gone]

    store.prune_runs(settled_before=LATER, archive=tmp_path)

    paged: list[int] = []
    after = 0
    while page := store.event_log(after=after, limit=2):
        paged += [event.position for event in page]
        after = page[-1].position
    [tombstone] = store.event_log(run_id="gone")
    assert paged == [*kept, tombstone.position]
    assert paged == sorted(paged)
    first = [event.position for event in store.event_log(run_id="first", limit=1)]
    assert first == kept[:1]


def test_an_earlier_tombstone_of_a_tree_is_no_run_and_stays(
    store: WorkflowStore, runtime: StoreRuntime, clock: FakeClock, tmp_path: Path
) -> None:
    finished(store, "root")
    # As a tree restored after an earlier prune holds its tombstone (under its root's id).
    tombstone_only(runtime, clock)
    earlier = store.event_log()[-1]

    report = prune(store, tmp_path)

    assert [tree.root_run_id for tree in report.archived] == ["root"]
    assert store.event_log()[0].position == earlier.position
    assert [event.wire_name for event in store.event_log()] == ["run-tree.archived"] * 2
    assert prune(store, tmp_path).trees == 0


def test_a_run_created_in_the_tree_after_its_bundle_was_written_keeps_the_tree(
    store: WorkflowStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    finished(store, "root")
    written = prune_module.archive_tree  # type: ignore[attr-defined]

    def archive_then_continue(*args: object) -> object:
        archived = written(*args)  # type: ignore[arg-type]
        # A continuation writes nothing to its parent: only the log can tell.
        store.create_run("late", workflow_name="review", input={}, parent_run_id="root")
        return archived

    monkeypatch.setattr(prune_module, "archive_tree", archive_then_continue)

    report = prune(store, tmp_path)

    assert report.archived == []
    assert [(tree.root_run_id, tree.reason) for tree in report.kept] == [
        ("root", "changed-while-archiving")
    ]
    assert store.get_run("late") is not None
    assert store.get_run("root") is not None


def test_another_store_numbers_its_session_on_from_the_pruned_order(
    durable_url: str, tmp_path: Path
) -> None:
    with open_store(durable_url) as store, open_store(durable_url) as other:
        lived(store, "gone")
        running_run(other, "after")
        # The other store projects its own commands: its cache holds the session's counter.
        queued_id(other, "after-ask", run_id="after")
        assert [m.order for m in other.session_outbox(SESSION)] == [1, 2, 3]

        prune(store, tmp_path)
        queued_id(other, "after-more", run_id="after")

        assert [m.order for m in other.session_outbox(SESSION)] == [1, 2]
        live = digests(store)
        store.rebuild_projection("session_outbox")
        assert digests(store) == live


class BuildStoppedError(Exception):
    """Stops a rebuild between two pages, leaving its building slot to be resumed."""


def test_a_building_slot_loses_the_tree_too_and_its_build_ends_equal(
    store: WorkflowStore, runtime: StoreRuntime, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lived(store, "first")
    gone_from = store.event_log()[-1].position
    lived(store, "gone")
    running_run(store, "after")
    queued_id(store, "after-ask", run_id="after")
    name = "session_outbox"
    monkeypatch.setattr(rebuild_module, "BUILD_PAGE_SIZE", 4)

    def stop_inside_the_tree() -> None:
        building = runtime.views.registry(name).building
        if building is not None and building.position > gone_from + 4:
            raise BuildStoppedError

    with pytest.raises(BuildStoppedError):
        runtime.builds.rebuild([name], on_page=stop_inside_the_tree)
    assert runtime.views.registry(name).building is not None

    assert [tree.root_run_id for tree in prune(store, tmp_path).archived] == ["first", "gone"]

    [outcome] = runtime.rebuild_blue_green([name])
    assert (outcome.equal, outcome.switched) == (True, True)
    live = digests(store)
    runtime.rebuild_projections()
    assert digests(store) == live


def test_positions_of_a_pruned_tree_are_never_given_again(
    store: WorkflowStore, tmp_path: Path
) -> None:
    store.create_run("live", workflow_name="review", input={})
    finished(store, "last")  # the top of the log
    top = store.event_log()[-1].position

    prune(store, tmp_path)
    store.create_run("next", workflow_name="review", input={})

    [tombstone] = store.event_log(run_id="last")
    [created] = store.event_log(run_id="next")
    assert top < tombstone.position < created.position


@pytest.mark.parametrize(
    "arguments",
    [
        {"settled_before": datetime(2027, 1, 1)},  # no zone
        {"settled_before": "2027-01-01"},
        {"archive": ""},
        {"archive": 42},
        {"archive": "no-such-folder"},
        {"limit": -1},
        {"limit": "2"},
        {"limit": True},
        {"dry_run": "yes"},
        {"progress": "bar"},
    ],
    ids=repr,
)
def test_bad_arguments_are_refused_and_nothing_is_written(
    store: WorkflowStore,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arguments: dict[str, object],
) -> None:
    finished(store, "root")
    monkeypatch.chdir(tmp_path)
    log = store.event_log()
    given: dict[str, object] = {"settled_before": LATER, "archive": tmp_path, **arguments}

    with pytest.raises(WorkflowError):
        store.prune_runs(**given)  # type: ignore[arg-type]

    assert store.event_log() == log
    assert list(tmp_path.iterdir()) == []


def test_a_prune_pages_through_runs_it_removes_as_it_goes(
    store: WorkflowStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Pages of two runs: the run a page ends with is often pruned before the next page.
    monkeypatch.setattr(retention, "_PAGE", 2)
    for number in range(7):
        if number in (2, 5):
            store.create_run(f"live-{number}", workflow_name="review", input={})
        else:
            finished(store, f"settled-{number}")
            finished(store, f"settled-{number}-child", parent_run_id=f"settled-{number}")

    report = prune(store, tmp_path)

    assert [tree.root_run_id for tree in report.archived] == [
        f"settled-{number}" for number in (0, 1, 3, 4, 6)
    ]
    assert [tree.root_run_id for tree in report.kept] == ["live-2", "live-5"]
    assert [run.run_id for run in store.list_runs().runs] == ["live-2", "live-5"]
