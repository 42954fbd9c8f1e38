"""A prune killed (SIGKILL) at each of its steps, on a SQLite file and on PostgreSQL: the store
holds either the whole tree or the tree gone with its tombstone and a verified bundle on disk,
never anything between; running the prune again finishes the job, and the store is then what
a prune that never crashed leaves (a rebuild gives its read models, each tree has one
tombstone). Memory keeps nothing across a process, so it has no crash to survive."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from runledger.domain.errors import RunArchivedError
from runledger.infrastructure import open_store, verify_bundle
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.integration.test_prune import finished, lived
from tests.support.prune_crash import CUTOFF, STEPS

# Processes killed or racing: a fault test, run by CI with -m slow.
pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]


def trees(store: WorkflowStore) -> None:
    lived(store, "first")
    finished(store, "second")
    finished(store, "second-child", parent_run_id="second")
    store.create_run("live", workflow_name="review", input={})


def crash(url: str, archive: Path, step: str) -> None:
    child = subprocess.run(
        [sys.executable, "-m", "tests.support.prune_crash", url, str(archive), step],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        check=False,
    )
    assert child.returncode == -9, child.stderr


def wire_names(store: WorkflowStore) -> list[str]:
    return [event.wire_name for event in store.event_log()]


@pytest.mark.parametrize("step", STEPS)
def test_a_prune_killed_at_a_step_leaves_the_tree_whole_or_gone_and_the_rerun_finishes(
    durable_url: str, tmp_path: Path, step: str
) -> None:
    url = durable_url
    archive = tmp_path / "archive"
    archive.mkdir()
    with open_store(url) as store:
        trees(store)
        before = store.event_log()
        first = [event for event in before if event.payload.get("run_id") == "first"]

    crash(url, archive, step)

    with open_store(url) as store:
        after = store.event_log()
        if step == "committed":
            # Gone, with its tombstone and the verified bundle it names.
            [tombstone] = store.event_log(run_id="first")
            assert tombstone.wire_name == "run-tree.archived"
            assert verify_bundle(tombstone.payload["bundle"]).ok
            assert [e for e in after if e.wire_name != "run-tree.archived"] == [
                e for e in before if e not in first
            ]
            with pytest.raises(RunArchivedError):
                store.get_run("first")
        else:
            # Whole: not one event gone, no tombstone.
            assert after == before
            assert store.get_run("first") is not None
        assert all(status.last_error is None for status in store.projection_status())

        report = store.prune_runs(settled_before=CUTOFF, archive=archive)

        expected = ["second"] if step == "committed" else ["first", "second"]
        assert [tree.root_run_id for tree in report.archived] == expected
        assert [tree.root_run_id for tree in report.kept] == ["live"]
        assert wire_names(store) == [
            *(e.wire_name for e in before if e.payload.get("run_id") == "live"),
            "run-tree.archived",
            "run-tree.archived",
        ]
        for tree in report.archived:
            assert verify_bundle(tree.bundle).ok
        live = {name: store.read_model_digest(name) for name in store.projection_names()}
    with open_runtime(url) as runtime:
        assert all(outcome.equal for outcome in runtime.verify_projections())
        runtime.rebuild_projections()
    with open_store(url) as store:
        assert {name: store.read_model_digest(name) for name in store.projection_names()} == live
