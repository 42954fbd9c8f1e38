"""An audit reads the run it is about as it was created (its id and lineage, which never
change), not replayed to its end, on every backend: unknown and pruned runs are refused as
``get_run`` refuses them, and the lineage it exports is the run's."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runledger.domain.errors import RunArchivedError, RunNotFoundError
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore

LATER = datetime(2027, 1, 1, tzinfo=UTC)


def test_a_run_as_created_has_its_lineage_and_none_of_its_later_changes(
    runtime: StoreRuntime, store: WorkflowStore
) -> None:
    store.create_run("root", workflow_name="review", input={"n": 1})
    store.create_run("child", workflow_name="review", input={}, parent_run_id="root")
    store.record_progress("child", status="running", status_detail="later")
    store.finish_run("child", status="completed", final_output={"ok": True})

    created = runtime.app.get_run_as_created("child")
    current = store.get_run("child")

    assert created is not None
    assert current is not None
    assert (created.run_id, created.parent_run_id, created.root_run_id) == (
        "child",
        "root",
        "root",
    )
    assert (created.status, created.final_output) != (current.status, current.final_output)
    assert created.status_detail is None
    assert runtime.app.get_run_as_created("nobody") is None


def test_an_audit_of_a_child_exports_its_lineage_read_from_the_runs_first_events(
    store: WorkflowStore, tmp_path: Path
) -> None:
    store.create_run("root", workflow_name="review", input={})
    store.create_run("child", workflow_name="review", input={}, parent_run_id="root")
    for number in range(3):
        store.record_progress("child", status="running", status_detail=f"step {number}")
    bundle = tmp_path / "child.jsonl"

    store.export_run("child", bundle)

    header = json.loads(bundle.read_text().splitlines()[0])
    assert header["run_id"] == "child"
    assert header["runs"] == ["root", "child"]
    assert store.verify_run("child").ok


def test_an_audit_of_an_unknown_or_pruned_run_is_refused_as_a_read_is(
    store: WorkflowStore, tmp_path: Path
) -> None:
    with pytest.raises(RunNotFoundError):
        store.export_run("nobody", tmp_path / "nobody.jsonl")
    store.create_run("root", workflow_name="review", input={})
    store.finish_run("root", status="completed")
    archive = tmp_path / "archive"
    archive.mkdir()
    store.prune_runs(settled_before=LATER, archive=archive)

    with pytest.raises(RunArchivedError):
        store.export_run("root", tmp_path / "root.jsonl")
    with pytest.raises(RunArchivedError):
        store.verify_run("root")
