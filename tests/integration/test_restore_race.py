"""Two processes restoring the same bundle at once, on a SQLite file and on PostgreSQL: one
restores the tree, the other is refused, and the tree's events are in the log once."""

from __future__ import annotations

import multiprocessing
from collections import Counter
from pathlib import Path

import pytest

from runledger.infrastructure import open_store
from tests.integration.test_prune import finished, lived
from tests.support.prune_crash import CUTOFF
from tests.support.restore_race import restore_process

# Processes killed or racing: a fault test, run by CI with -m slow.
pytestmark = pytest.mark.slow

TRIALS = 5


def test_two_processes_restoring_one_bundle_restore_it_once(
    durable_url: str, tmp_path: Path
) -> None:
    url = durable_url
    context = multiprocessing.get_context("spawn")
    with open_store(url) as store:
        lived(store, "tree")
        finished(store, "tree-child", parent_run_id="tree")
        events = len(store.event_log())
    outcomes: Counter[str] = Counter()
    for trial in range(TRIALS):
        archive = tmp_path / f"archive-{trial}"
        archive.mkdir()
        with open_store(url) as store:
            [archived] = store.prune_runs(settled_before=CUTOFF, archive=archive).archived
        barrier = context.Barrier(2)
        results = context.Queue()
        racers = [
            context.Process(target=restore_process, args=(url, archived.bundle, barrier, results))
            for _ in range(2)
        ]
        for racer in racers:
            racer.start()
        answers = sorted(results.get(timeout=120) for _ in racers)
        for racer in racers:
            racer.join(timeout=60)
        assert [kind for kind, _ in answers] == ["refused", "restored"], answers
        # Refused as restored already, as in the store, or at the guard: whichever check the
        # loser reached after the winner's commit.
        assert answers[0][1].startswith("Cannot restore from "), answers
        outcomes.update(kind for kind, _ in answers)
        with open_store(url) as store:
            kept = [e for e in store.event_log() if not e.wire_name.startswith("run-tree.")]
            assert len(kept) == events
            assert store.get_run("tree-child") is not None
    assert outcomes == {"restored": TRIALS, "refused": TRIALS}
