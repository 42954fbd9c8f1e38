"""Retention's way back on every backend: a pruned tree restored from its bundle answers every
query as before the prune; a bundle that does not verify, that no tombstone names, that does
not match its tombstone, or whose tree is in the store is refused with nothing written."""

from __future__ import annotations

import copy
import dataclasses
import gc
import hashlib
from pathlib import Path
from typing import Any

import pytest

from runledger.domain.errors import RestoreNotVerifiedError, RestoreRefusedError, RunArchivedError
from runledger.domain.records import PrunedTree
from runledger.domain.run_tree_archives import RunTreeArchive
from runledger.domain.values import SYSTEM
from runledger.infrastructure import open_store
from runledger.infrastructure.audit import reprojection
from runledger.infrastructure.audit import restore as restore_module
from runledger.infrastructure.audit import verify_bundle as verify_bundle_module
from runledger.infrastructure.audit.bundle_format import entry_of
from runledger.infrastructure.audit.reprojection import Reprojection, reproject
from runledger.infrastructure.audit.restore import check_restored, read_archive_bundle
from runledger.infrastructure.runtime import StoreRuntime, default_projections
from runledger.infrastructure.store import WorkflowStore
from tests.integration.test_prune import digests, finished, lived, prune
from tests.support.clock import FakeClock
from tests.support.scenario import SESSION, queued_id, running_run

TREE = ("middle", "middle-child")


def answers(store: WorkflowStore) -> dict[str, Any]:
    """What a host reads of the tree ``TREE`` and of the session it shares with others."""
    found: dict[str, Any] = {}
    for run_id in TREE:
        found[f"run {run_id}"] = store.get_run(run_id)
        found[f"queue {run_id}"] = store.follow_up_queue(run_id)
        found[f"terminal {run_id}"] = store.terminal_data(run_id)
        found[f"settings {run_id}"] = store.settings_scopes(run_id)
        found[f"segments {run_id}"] = store.session_segments(run_id)
        found[f"entries {run_id}"] = store.session_events(run_id)
        found[f"log {run_id}"] = [
            (event.wire_name, event.aggregate_id, event.version, event.payload)
            for event in store.event_log(run_id=run_id)
            if not event.wire_name.startswith("run-tree.")
        ]
    found["tree"] = store.list_runs(root_run_id="middle").runs
    # Session-wide numbers follow the log, so the restored tree's messages come last: the
    # order of the session's messages is compared as each tree sees its own.
    found["outbox"] = sorted(
        (message.run_id, message.workflow_message_id, message.status)
        for message in store.session_outbox(SESSION)
    )
    return found


@pytest.fixture
def pruned(store: WorkflowStore, tmp_path: Path) -> tuple[PrunedTree, dict[str, Any]]:
    """Three trees of one session, the middle one pruned; its answers from before."""
    lived(store, "before", pending=True)
    lived(store, "middle")
    lived(store, "middle-child", parent_run_id="middle")
    running_run(store, "after")
    queued_id(store, "after-ask", run_id="after")
    before = answers(store)
    folder = tmp_path / "archive"
    folder.mkdir()
    [archived] = prune(store, folder).archived
    return archived, before


def test_a_restored_tree_answers_every_query_as_before_the_prune(
    store: WorkflowStore, runtime: StoreRuntime, pruned: tuple[PrunedTree, dict[str, Any]]
) -> None:
    archived, before = pruned

    restored = store.restore_runs(archived.bundle)

    assert (restored.root_run_id, restored.run_ids) == ("middle", list(TREE))
    assert restored.bundle_sha256 == archived.bundle_sha256
    assert restored.events == archived.events
    assert answers(store) == before
    # The tombstone stays and says so; a rebuild from the log gives the live rows.
    tombstones = [
        event.wire_name
        for event in store.event_log(run_id="middle")
        if event.wire_name.startswith("run-tree.")
    ]
    assert tombstones == ["run-tree.archived", "run-tree.restored"]
    assert all(outcome.equal for outcome in runtime.verify_projections())
    live = digests(store)
    runtime.rebuild_projections()
    assert digests(store) == live
    assert store.verify_run("middle-child").ok


def test_a_restored_tree_takes_commands_and_can_be_pruned_again(
    store: WorkflowStore,
    runtime: StoreRuntime,
    pruned: tuple[PrunedTree, dict[str, Any]],
    tmp_path: Path,
) -> None:
    archived, _ = pruned
    store.restore_runs(archived.bundle)

    store.create_run("late-child", workflow_name="review", input={}, parent_run_id="middle")
    store.finish_run("late-child", status="completed")
    again = tmp_path / "again"
    again.mkdir()
    report = prune(store, again)

    assert [tree.root_run_id for tree in report.archived] == ["middle"]
    with pytest.raises(RunArchivedError) as raised:
        store.get_run("late-child")
    assert raised.value.bundle_sha256 == report.archived[0].bundle_sha256
    # Both tombstones stay in the log; the second bundle holds the first one's events.
    wire_names = [event.wire_name for event in store.event_log(run_id="middle")]
    assert wire_names == ["run-tree.archived", "run-tree.restored", "run-tree.archived"]
    store.restore_runs(report.archived[0].bundle)
    assert store.get_run("late-child") is not None
    assert all(outcome.equal for outcome in runtime.verify_projections())


def test_a_restore_projects_and_checks_with_the_collector_paused_and_leaves_it_on(
    store: WorkflowStore,
    runtime: StoreRuntime,
    pruned: tuple[PrunedTree, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bundle's parsed events and its verifying re-projection live to the restore's end:
    collections on the way walked them all again (``collector``)."""
    archived, before = pruned
    seen: list[tuple[str, bool]] = []
    catch_up = runtime.projector.catch_up

    def watched_catch_up(*args: Any, **kwargs: Any) -> Any:
        seen.append(("catch-up", gc.isenabled()))
        return catch_up(*args, **kwargs)

    def watched_check(*args: Any, **kwargs: Any) -> None:
        seen.append(("check", gc.isenabled()))
        check_restored(*args, **kwargs)

    monkeypatch.setattr(runtime.projector, "catch_up", watched_catch_up)
    monkeypatch.setattr(restore_module, "check_restored", watched_check)
    enabled = gc.isenabled()
    gc.enable()
    try:
        store.restore_runs(archived.bundle)
        after = gc.isenabled()
    finally:
        if not enabled:
            gc.disable()

    assert ("catch-up", False) in seen
    assert ("check", False) in seen
    assert not any(on for _, on in seen)
    assert after
    assert answers(store) == before


def test_the_same_bundle_is_not_restored_twice(
    store: WorkflowStore, pruned: tuple[PrunedTree, dict[str, Any]]
) -> None:
    archived, _ = pruned
    store.restore_runs(archived.bundle)
    log = store.event_log()

    with pytest.raises(RestoreRefusedError, match="restored from it already"):
        store.restore_runs(archived.bundle)
    assert store.event_log() == log


def test_a_bundle_of_a_live_tree_is_refused(store: WorkflowStore, tmp_path: Path) -> None:
    finished(store, "root")
    bundle = tmp_path / "live.jsonl"
    store.export_run("root", bundle)
    log = store.event_log()

    with pytest.raises(RestoreRefusedError, match="no tombstone of run tree root"):
        store.restore_runs(bundle)
    assert store.event_log() == log


def test_a_bundle_that_does_not_verify_is_refused(
    store: WorkflowStore, pruned: tuple[PrunedTree, dict[str, Any]], tmp_path: Path
) -> None:
    archived, _ = pruned
    tampered = tmp_path / "tampered.jsonl"
    text = Path(archived.bundle).read_text(encoding="utf-8")
    tampered.write_text(text.replace('"ship"', '"hold"', 1), encoding="utf-8")
    log = store.event_log()

    with pytest.raises(RestoreRefusedError, match="does not verify"):
        store.restore_runs(tampered)
    with pytest.raises(RestoreRefusedError, match="no such file"):
        store.restore_runs(tmp_path / "missing.jsonl")
    with pytest.raises(RestoreRefusedError, match=r"from .+: it is a folder, not a bundle file"):
        store.restore_runs(tmp_path)
    with pytest.raises(RestoreRefusedError, match=r'Cannot restore from "": the path is empty'):
        store.restore_runs("")
    # An export's path checks, each worded as a restore's refusal.
    with pytest.raises(RestoreRefusedError, match=r"from a\\0b: the path must be a file name"):
        store.restore_runs("a\0b")
    with pytest.raises(RestoreRefusedError, match=r"from \\ud800: the path must be a file name"):
        store.restore_runs("\ud800")
    with pytest.raises(RestoreRefusedError, match="from 7: the path must be text or a path"):
        store.restore_runs(7)  # type: ignore[arg-type]
    assert store.event_log() == log
    with pytest.raises(RunArchivedError):
        store.get_run("middle")


def test_a_bundle_that_does_not_match_its_tombstone_is_refused(
    store: WorkflowStore,
    runtime: StoreRuntime,
    clock: FakeClock,
    pruned: tuple[PrunedTree, dict[str, Any]],
    tmp_path: Path,
) -> None:
    archived, _ = pruned
    # A bundle that verifies, of another store's tree with the same root id, and a
    # tombstone here that names its SHA-256 but other versions (a forged or mixed-up one).
    other = tmp_path / "other.jsonl"
    with open_store("memory://") as elsewhere:
        finished(elsewhere, "middle")
        elsewhere.export_run("middle", other)
    runtime.app.save(
        RunTreeArchive.archive(
            "middle",
            run_ids=["middle"],
            events=2,
            aggregates={},
            bundle=str(other),
            bundle_sha256=hashlib.sha256(other.read_bytes()).hexdigest(),
            removed_digests={},
            actor=SYSTEM,
            now=clock(),
        )
    )
    log = store.event_log()

    with pytest.raises(RestoreRefusedError, match="does not match its tombstone"):
        store.restore_runs(other)
    assert store.event_log() == log
    with pytest.raises(RunArchivedError):
        store.get_run("middle")
    # The genuine bundle still restores.
    assert store.restore_runs(archived.bundle).events == archived.events


def test_another_store_sees_the_restored_tree(
    store: WorkflowStore,
    second_store: WorkflowStore,
    pruned: tuple[PrunedTree, dict[str, Any]],
) -> None:
    archived, before = pruned
    with pytest.raises(RunArchivedError):
        second_store.get_run("middle")

    second_store.restore_runs(archived.bundle)

    assert store.get_run("middle") == before["run middle"]
    store.record_progress("after", status="running", current_node="next")
    assert second_store.get_run("middle-child") == before["run middle-child"]


def test_events_that_came_back_other_than_bundled_fail_the_restore_check(
    store: WorkflowStore, runtime: StoreRuntime, pruned: tuple[PrunedTree, dict[str, Any]]
) -> None:
    archived, _ = pruned
    store.restore_runs(archived.bundle)
    bundle = read_archive_bundle(archived.bundle)
    # A bundle that agrees with itself (its digests are its events') but holds one follow-up's
    # prompt other than the log gave back.
    [queued] = [
        index
        for index, event in enumerate(bundle.events)
        if event["wire_name"] == "follow-up.queued" and event["state"]["run_id"] == "middle"
    ][:1]
    altered = copy.deepcopy(bundle.events)
    altered[queued]["state"]["prompt"] += " (altered)"
    digests = reproject(map(entry_of, altered), default_projections()).digests()
    verified = dataclasses.replace(bundle, events=altered, digests=digests)

    with pytest.raises(RestoreNotVerifiedError, match=r"re-project to another \w+ digest"):
        check_restored(runtime, verified)


def counted_reprojections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The events of each re-projection a restore (or its bundle's check) makes from now."""
    counted: list[int] = []

    def counting(*args: Any, **kwargs: Any) -> Reprojection:
        result = reprojection.reproject(*args, **kwargs)
        counted.append(result.events)
        return result

    monkeypatch.setattr(restore_module, "reproject", counting)
    monkeypatch.setattr(verify_bundle_module, "reproject", counting)
    return counted


def test_a_restore_whose_events_came_back_as_bundled_reprojects_them_once(
    store: WorkflowStore,
    pruned: tuple[PrunedTree, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The bundle's own check re-projected these events to its digests; the live rows are
    compared with that re-projection, its positions moved to the log's new ones, not with a
    second one at those positions."""
    archived, before = pruned
    counted = counted_reprojections(monkeypatch)

    restored = store.restore_runs(archived.bundle)

    assert counted == [restored.events]
    assert answers(store) == before


def test_a_tree_event_the_bundle_does_not_hold_is_reprojected_with_the_rest_for_the_check(
    store: WorkflowStore,
    runtime: StoreRuntime,
    pruned: tuple[PrunedTree, dict[str, Any]],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An event of the tree a read model takes, logged after the bundle was written, changes
    the live rows: they are checked against the tree re-projected where it lies now, not
    against the bundle's re-projection with its positions moved."""
    archived, _ = pruned
    restored = store.restore_runs(archived.bundle)
    store.set_presentation_instructions("middle", "Show the review first.")
    [later] = store.event_log(run_id="middle")[-1:]
    assert any(later.wire_name in p.topics for p in default_projections())
    counted = counted_reprojections(monkeypatch)

    check_restored(runtime, read_archive_bundle(archived.bundle))

    # The bundle's check, then every event read back: the tree's, its two tombstones and the
    # later one.
    assert counted == [restored.events, restored.events + 3]


def test_a_tree_pruned_again_restores_without_reprojecting_its_events_for_the_digests(
    store: WorkflowStore,
    pruned: tuple[PrunedTree, dict[str, Any]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The second bundle holds the first prune's tombstones, which stayed in the log with
    their keys in field order while the bundle holds them in canonical order: the same
    payloads, so the events still count as come back as bundled."""
    archived, before = pruned
    store.restore_runs(archived.bundle)
    again = tmp_path / "again"
    again.mkdir()
    [second] = prune(store, again).archived
    counted = counted_reprojections(monkeypatch)

    store.restore_runs(second.bundle)

    tombstones = [
        event.wire_name
        for event in store.event_log(run_id="middle")
        if event.wire_name.startswith("run-tree.")
    ]
    assert tombstones == ["run-tree.archived", "run-tree.restored"] * 2
    # The bundle's events (the first tombstones among them), and no re-projection for the
    # digests, nor for the live rows.
    assert counted == [second.events]
    assert answers(store) == before


def test_a_payload_read_back_in_another_key_order_is_the_bundles() -> None:
    bundled = b'{"a":1,"b":{"c":[1.5,"x"],"d":null}}'

    assert restore_module._same_payload(b'{"b":{"d":null,"c":[1.5,"x"]},"a":1}', bundled)
    assert not restore_module._same_payload(b'{"b":{"d":null,"c":[1.5,"x"]},"a":1.0}', bundled)
    assert not restore_module._same_payload(b'{"a":1,"b":{"c":[1.5,"y"],"d":null}}', bundled)
    assert not restore_module._same_payload(b'{"a":1', bundled)
