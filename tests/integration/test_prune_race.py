"""A command racing the prune of its tree, from another thread and from another process, on a
SQLite file and on PostgreSQL, many times over: either the command wins and the tree is kept
(``changed-while-archiving``, or archived with the command's event in its bundle when the
command came before the tree was judged), or the prune wins and the command raises
``RunArchivedError``. Never an acknowledged write lost, never a tree deleted with a command's
events left behind."""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest

from runledger.domain.records import PruneReport
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.prune_race import KINDS, command_process, late_run, run_command

LATER = datetime(2099, 1, 1, tzinfo=UTC)
TRIALS = 30
FIRST_DELAY = 0.05
"""How long the first command may wait after the start; later ones wait up to as long as
the last prune took, so the command lands anywhere in it (both orders happen)."""

Start = Callable[[str, str, str, float], None]
"""Starts one trial's command (kind, root, child, delay): it waits for the prune to start."""
Finish = Callable[[], tuple[str, str]]
"""The command's outcome: ("ok" | "archived" | "error", detail)."""


@contextmanager
def in_a_thread(url: str) -> Iterator[tuple[Start, Finish]]:
    """A second store in this process (a cache of its own), its command in another thread."""
    with open_store(url) as other:
        barrier = threading.Barrier(2)
        outcomes: list[tuple[str, str]] = []
        threads: list[threading.Thread] = []

        def start(kind: str, root: str, child: str, delay: float) -> None:
            def command() -> None:
                barrier.wait()
                threading.Event().wait(delay)
                outcomes.append(run_command(other, kind, root, child))

            threads[:] = [threading.Thread(target=command)]
            threads[0].start()
            barrier.wait()

        def finish() -> tuple[str, str]:
            threads[0].join()
            return outcomes.pop()

        yield start, finish


@contextmanager
def in_a_process(url: str) -> Iterator[tuple[Start, Finish]]:
    """A store in another process, its command started at the same barrier."""
    context = multiprocessing.get_context("spawn")
    jobs, results, barrier = context.Queue(), context.Queue(), context.Barrier(2)
    process = context.Process(target=command_process, args=(url, jobs, results, barrier))
    process.start()
    try:
        assert results.get(timeout=120) == ("ready", "")

        def start(kind: str, root: str, child: str, delay: float) -> None:
            jobs.put((kind, root, child, delay))
            barrier.wait(timeout=60)

        def finish() -> tuple[str, str]:
            outcome: tuple[str, str] = results.get(timeout=120)
            return outcome

        yield start, finish
    finally:
        jobs.put(None)
        process.join(timeout=60)
        if process.is_alive():
            process.kill()


def settled_tree(store: WorkflowStore, trial: int) -> tuple[str, str]:
    root, child = f"root-{trial}", f"child-{trial}"
    store.create_run(root, workflow_name="race", input={})
    store.finish_run(root, status="completed")
    store.create_run(child, workflow_name="race", input={}, parent_run_id=root)
    store.finish_run(child, status="completed")
    return root, child


def judge(
    store: WorkflowStore, report: PruneReport, kind: str, root: str, child: str, outcome: str
) -> str:
    """The trial's outcome, once every invariant of it held."""
    archived = {tree.root_run_id: tree for tree in report.archived}
    kept = {tree.root_run_id: tree for tree in report.kept}
    marker = late_run(root) if kind == "continue" else f'"tree":"{root}"'
    if root in archived:
        tree = archived[root]
        # Nothing of the tree is left but its tombstone.
        assert store.event_log(run_id=child) == []
        assert [e.wire_name for e in store.event_log(run_id=root)] == ["run-tree.archived"]
        in_bundle = marker in Path(tree.bundle).read_text()
        if outcome == "ok":
            # The command came first, before the tree was judged: its event is in the bundle.
            assert in_bundle, "an acknowledged write was pruned without being archived"
            return "archived-with-the-command"
        assert outcome == "archived"
        assert not in_bundle
        return "prune-won"
    assert outcome == "ok", f"the tree is live but the command said {outcome}"
    assert root in kept
    if kind == "continue":
        assert store.get_run(late_run(root)) is not None
    else:
        assert any(e.wire_name == "run.update-published" for e in store.event_log(run_id=child))
    return f"command-won ({kept[root].reason})"


def race(url: str, tmp_path: Path, *, process: bool) -> Counter[str]:
    chance = random.Random(24)
    outcomes: Counter[str] = Counter()
    window = FIRST_DELAY
    with open_store(url) as store:
        context = in_a_process(url) if process else in_a_thread(url)
        with context as (start, finish):
            for trial in range(TRIALS):
                kind = KINDS[trial % len(KINDS)]
                root, child = settled_tree(store, trial)
                folder = tmp_path / f"trial-{trial}"
                folder.mkdir()
                start(kind, root, child, chance.uniform(0, window))
                began = time.perf_counter()
                report = store.prune_runs(settled_before=LATER, archive=folder)
                window = time.perf_counter() - began
                status, detail = finish()
                assert status != "error", detail
                outcomes[judge(store, report, kind, root, child, status)] += 1
                # A tree the command kept settled is pruned now, so trials do not pile up.
                store.prune_runs(settled_before=LATER, archive=folder)
        assert all(outcome.equal for outcome in store._runtime.verify_projections())
    return outcomes


@pytest.mark.parametrize("where", ["thread", "process"])
def test_a_command_racing_the_prune_of_its_tree_is_never_lost(
    durable_url: str, tmp_path: Path, where: str
) -> None:
    outcomes = race(durable_url, tmp_path, process=where == "process")

    # The counts, for the report (pytest -s): which order won depends on timing, so only
    # the invariants of each trial are asserted (``judge``), never a count.
    print(f"{where}: {dict(outcomes)}")
    assert sum(outcomes.values()) == TRIALS
