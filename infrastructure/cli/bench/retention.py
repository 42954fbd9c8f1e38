"""Retention benchmarks: pruning settled run trees while commands flow, and restoring one.

- R1: ``prune_runs`` of the settled trees of a generated store (1M events and 10,000 trees
  with ``--full``), in a process of its own whose peak RSS is the row's goal (≤ 300 MB);
  meanwhile this process queues 50 follow-ups a second on a live run, and their p99 is
  reported beside the rate, with the database's size before, after the prune and after
  ``compact``.
- R2: ``restore_runs`` of one tree of 10,000 follow-ups next to its export (the baseline):
  a restore verifies the bundle, re-inserts and projects its events, and re-verifies the
  tree's rows, so it costs a few exports.

``python -m runledger.infrastructure.cli.bench.retention --prune URL FOLDER LIMIT`` is the
measured child of R1; it prints its figures as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from runledger.domain.errors import StorageUnavailableError
from runledger.domain.values import Actor
from runledger.infrastructure.cli.bench.memory import peak_rss_mb
from runledger.infrastructure.cli.bench.runner import (
    TURNS,
    BenchResult,
    bench_backend,
    matched_turns,
)
from runledger.infrastructure.cli.bench.storage import disk_bytes
from runledger.infrastructure.cli.compaction import compact_store
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store

PRUNE_EVENTS: Final = 1_000_000
PRUNE_TREES: Final = 10_000
RESTORE_FOLLOW_UPS: Final = 10_000
RSS_GOAL_MB: Final = 300.0
RESTORE_GOAL: Final = 4.0
COMMAND_INTERVAL: Final = 0.02
"""R1's writer queues a follow-up every 20 ms (50 a second) while the prune runs."""
MODULE: Final = "runledger.infrastructure.cli.bench.retention"
_LIVE_RUN: Final = "retention-live-run"
_LIVE_SESSION: Final = "retention-live-session"


def _filled(url: str, events: int, *, prefix: str) -> None:
    """A generated history of runs whose follow-ups were delivered (each run its own settled
    tree of about 100 events), projected."""
    generator = HistoryGenerator(prefix=prefix, delivered=True)
    with open_runtime(url, embedded_projections=False) as runtime:
        for batch in generator.batches(events, follow_ups_per_run=20):
            runtime.storage.events.insert_events(batch)
        runtime.rebuild_projections()


def _megabytes(size: int) -> str:
    return f"{size / 1e6:,.1f} MB"


def prune_rate(url: str, *, events: int, trees: int) -> BenchResult:
    """R1: prune up to ``trees`` settled trees while one writer queues follow-ups."""
    _filled(url, events, prefix="retention")
    with open_store(url) as store:
        store.create_run(_LIVE_RUN, workflow_name="bench", input={})
        store.bind_origin_session(_LIVE_RUN, _LIVE_SESSION)
    before = disk_bytes(url)
    latencies: list[float] = []
    refused: list[str] = []
    with tempfile.TemporaryDirectory(prefix="runledger-prune-") as folder:
        child = subprocess.Popen(  # noqa: S603 - our own module, with the URL given to us
            [sys.executable, "-m", MODULE, "--prune", url, folder, str(trees)],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        )
        commands = threading.Thread(target=_queue_until, args=(url, child, latencies, refused))
        commands.start()
        output, _ = child.communicate()
        commands.join()
        if child.returncode != 0:
            raise RuntimeError(f"the prune process failed with exit code {child.returncode}")
    figures = json.loads(output.strip().splitlines()[-1])
    after = disk_bytes(url)
    compacted = after
    if bench_backend(url) == "sqlite":
        compact_store(url, "sqlite")
        compacted = disk_bytes(url)
    rate = figures["events"] / figures["seconds"]
    p99 = _p99(latencies)
    peak = float(figures["peak_rss_mb"])
    return BenchResult(
        "R1",
        f"prune {figures['trees']:,} settled trees ({figures['events']:,} of {events:,} events, "
        f"{rate:,.0f} events/s, peak RSS {peak:.0f} MB) while {len(latencies):,} follow-ups "
        f"were queued (p99 {p99 * 1000:.1f} ms, {len(refused)} refused as unavailable); "
        f"database {_megabytes(before)} -> {_megabytes(after)}, "
        f"{_megabytes(compacted)} compacted",
        peak,
        "MB",
        None,
        None,
        f"<= {RSS_GOAL_MB:.0f} MB",
        peak <= RSS_GOAL_MB,
    )


def _queue_until(
    url: str, child: subprocess.Popen[str], latencies: list[float], refused: list[str]
) -> None:
    """Queue follow-ups at a steady host's pace until the prune ends: the row measures the
    prune beside commands, and a writer flat out would take the other core from it."""
    with open_store(url) as store:
        number = 0
        due = time.perf_counter()
        while child.poll() is None:
            number += 1
            time.sleep(max(0.0, due - time.perf_counter()))
            started = time.perf_counter()
            due = started + COMMAND_INTERVAL
            try:
                _queue(store, number)
            except StorageUnavailableError as error:
                # A command refused while the prune held the store (retryable): counted.
                refused.append(error.code)
                continue
            latencies.append(time.perf_counter() - started)


def _queue(store: WorkflowStore, number: int) -> None:
    store.queue_follow_up(
        _LIVE_RUN,
        request_id=f"meanwhile-{number}",
        target_session_id=_LIVE_SESSION,
        actor=Actor("session", _LIVE_SESSION),
        source="pi-session",
        prompt=f"Meanwhile {number}: keep going.",
    )


def _p99(latencies: list[float]) -> float:
    if not latencies:
        return 0.0
    ordered = sorted(latencies)
    return ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]


def _prune_in_this_process(url: str, folder: str, limit: int) -> None:
    with open_store(url) as store:
        # The generated trees ended in January 2026; the live run has not ended.
        cutoff = datetime.now(UTC) - timedelta(seconds=1)
        started = time.perf_counter()
        report = store.prune_runs(settled_before=cutoff, archive=folder, limit=limit)
        seconds = time.perf_counter() - started
    peak = peak_rss_mb()
    events = sum(tree.events for tree in report.archived)
    print(
        json.dumps(
            {
                "seconds": seconds,
                "events": events,
                "trees": len(report.archived),
                "peak_rss_mb": round(peak, 1),
            }
        )
    )


def restore_ratio(url: str, *, follow_ups: int) -> BenchResult:
    """R2: restore one tree of ``follow_ups`` follow-ups, next to its export, in ``TURNS``
    turns of export, prune and restore of the same tree (``runner.matched_turns``): one
    export and one restore, a few seconds apart, gave 3.2x and 5.3x in two runs of one
    evening, as load fell on one side or the other."""
    generator = HistoryGenerator(prefix="restore", delivered=True)
    with open_runtime(url, embedded_projections=False) as runtime:
        runtime.storage.events.insert_events(generator.run_events(follow_ups))
        runtime.rebuild_projections()
    run_id = "restore-run-1"
    exports: list[float] = []
    restores: list[float] = []
    with open_store(url) as store, tempfile.TemporaryDirectory() as folder:
        for turn in range(TURNS):
            exported = Path(folder) / f"export-{turn}.jsonl"
            started = time.perf_counter()
            store.export_run(run_id, exported)
            exports.append(time.perf_counter() - started)
            archive = Path(folder) / f"archive-{turn}"
            archive.mkdir()
            report = store.prune_runs(settled_before=datetime.now(UTC), archive=archive)
            [tree] = report.archived
            started = time.perf_counter()
            restored = store.restore_runs(tree.bundle)
            restores.append(time.perf_counter() - started)
    restore, baselines = matched_turns(restores, {"export": exports})
    export = baselines["export"]
    ratio = restore / export
    return BenchResult(
        "R2",
        f"restore of one tree of {follow_ups:,} follow-ups ({restored.events:,} events) "
        f"vs its export (median of {TURNS} turns: export, prune, restore)",
        restore,
        "s",
        export,
        ratio,
        f"<= {RESTORE_GOAL:.0f} x its export",
        ratio <= RESTORE_GOAL,
        baselines,
    )


if __name__ == "__main__":
    if sys.argv[1:2] == ["--prune"]:
        _prune_in_this_process(sys.argv[2], sys.argv[3], int(sys.argv[4]))
