"""The ``run-tree.archived`` tombstone in a live log, on every backend: the audit of its root
shows it, read models take no row from it, and bundles that hold it verify.

Nothing writes a tombstone yet but this test (retention's delete is the next step); these
tests pin that a log holding one stays readable by everything that reads the log.
"""

from __future__ import annotations

from pathlib import Path

from runledger.domain.run_tree_archives import RunTreeArchive, run_tree_lookup_key
from runledger.domain.values import SYSTEM
from runledger.infrastructure import verify_bundle
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from tests.support.clock import FakeClock

SHA = "ab" * 32


def settled_tree_with_tombstone(
    store: WorkflowStore, runtime: StoreRuntime, clock: FakeClock
) -> None:
    store.create_run("root", workflow_name="review", input={})
    store.finish_run("root", status="completed")
    tombstone_only(runtime, clock)


def test_the_audit_of_the_root_shows_its_tombstone(
    store: WorkflowStore, runtime: StoreRuntime, clock: FakeClock
) -> None:
    settled_tree_with_tombstone(store, runtime, clock)

    last = store.audit_run("root").entries[-1]

    assert (last.wire_name, last.actor.type) == ("run-tree.archived", "system")
    assert last.summary.endswith(
        f"1 run(s) archived: 2 events to archive/tree.jsonl (sha256 {SHA})"
    )


def test_read_models_take_no_row_from_a_tombstone(
    store: WorkflowStore, runtime: StoreRuntime, clock: FakeClock
) -> None:
    store.create_run("root", workflow_name="review", input={})
    store.finish_run("root", status="completed")
    before = {name: store.read_model_digest(name) for name in store.projection_names()}

    tombstone_only(runtime, clock)

    assert {name: store.read_model_digest(name) for name in store.projection_names()} == before
    assert all(outcome.equal for outcome in runtime.verify_projections())
    assert all(status.last_error is None for status in store.projection_status())


def tombstone_only(runtime: StoreRuntime, clock: FakeClock) -> None:
    runtime.app.save(
        RunTreeArchive.archive(
            "root",
            run_ids=["root"],
            events=2,
            aggregates={},
            bundle="archive/tree.jsonl",
            bundle_sha256=SHA,
            removed_digests={},
            actor=SYSTEM,
            now=clock(),
        )
    )


def test_a_bundle_holding_a_tombstone_verifies(
    store: WorkflowStore, runtime: StoreRuntime, clock: FakeClock, tmp_path: Path
) -> None:
    settled_tree_with_tombstone(store, runtime, clock)
    path = tmp_path / "root.jsonl"

    store.export_run("root", path)
    verdict = verify_bundle(path)

    assert (verdict.ok, verdict.events) == (True, 3)


def test_the_tombstones_of_a_tree_are_found_by_its_root(
    store: WorkflowStore, runtime: StoreRuntime, clock: FakeClock
) -> None:
    settled_tree_with_tombstone(store, runtime, clock)

    [found] = runtime.storage.originator_ids_by_key(run_tree_lookup_key("root"))
    archive = runtime.app.load(RunTreeArchive, found)

    assert archive is not None
    assert (archive.root_run_id, archive.bundle_sha256, archive.events) == ("root", SHA, 2)
    assert archive.archived_at == store.event_log()[-1].recorded_at
