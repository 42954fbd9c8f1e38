"""Audit benchmarks: ``audit --verify`` of one big run, and export + offline verify of it.

The store holds about ``events`` events: one run with ``follow_ups`` follow-ups (about three
events each), then generated runs of 30 follow-ups up to the total. The baseline of both rows
is that same store's full rebuild of every read model: verifying one run must cost less than
rebuilding everything. They run in ``TURNS`` interleaved turns (rebuild, verify, export and
verify-bundle), each row's value the median of its turns and its ratio the median of the
per-turn ratios (``runner.matched_turns``), so load that falls on one turn meets both sides.
Rows are ``bench.BenchResult``s, like ``runledger bench``'s.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path
from typing import Final

from runledger.infrastructure.audit.verify_bundle import verify_bundle
from runledger.infrastructure.cli.bench.runner import TURNS, BenchResult, Scratch, matched_turns
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore

EVENTS: Final = 100_000
FOLLOW_UPS: Final = 10_000


def audit_bench(
    url: str, *, events: int = EVENTS, follow_ups: int = FOLLOW_UPS
) -> list[BenchResult]:
    """Rows A1 (verify one run) and A2 (export it, then verify the bundle offline)."""
    scratch = Scratch(url)
    try:
        return _measure(scratch, events=events, follow_ups=follow_ups)
    finally:
        scratch.close()


def _measure(scratch: Scratch, *, events: int, follow_ups: int) -> list[BenchResult]:
    url = scratch.new_url()
    generator = HistoryGenerator(prefix="audit")
    big = generator.run_events(follow_ups)
    run_id = "audit-run-1"
    with open_runtime(url, embedded_projections=False) as runtime:
        runtime.storage.events.insert_events(big)
        for batch in generator.batches(max(0, events - len(big))):
            runtime.storage.events.insert_events(batch)
        total = runtime.storage.max_position()
    rebuilds: list[float] = []
    verifies: list[float] = []
    exports: list[float] = []
    offlines: list[float] = []
    for _ in range(TURNS):
        with open_runtime(url, embedded_projections=False) as runtime:
            started = time.perf_counter()
            runtime.rebuild_projections()
            rebuilds.append(time.perf_counter() - started)
        with open_runtime(url) as runtime, tempfile.TemporaryDirectory() as folder:
            store = WorkflowStore(runtime)
            started = time.perf_counter()
            verdict = store.verify_run(run_id)
            verifies.append(time.perf_counter() - started)
            bundle = Path(folder) / "bundle.jsonl"
            started = time.perf_counter()
            store.export_run(run_id, bundle)
            exports.append(time.perf_counter() - started)
            started = time.perf_counter()
            checked = verify_bundle(bundle)
            offlines.append(time.perf_counter() - started)
        if not (verdict.ok and checked.ok):
            raise RuntimeError(f"the benchmark's run does not verify: {verdict} {checked}")
    verify, verify_baselines = matched_turns(verifies, {"rebuild": rebuilds})
    audit = [export + offline for export, offline in zip(exports, offlines, strict=True)]
    exported_verified, audit_baselines = matched_turns(audit, {"rebuild": rebuilds})
    exported, offline = statistics.median(exports), statistics.median(offlines)
    where = f"{verdict.events:,} events of a run with {follow_ups:,} follow-ups, {total:,} in all"
    turns = f"median of {TURNS} turns, each beside a full rebuild"
    return [
        BenchResult(
            "A1",
            f"audit --verify of one run ({where}; {turns})",
            verify,
            "s",
            verify_baselines["rebuild"],
            verify / verify_baselines["rebuild"],
            "< 1 x a full rebuild of every read model",
            verify < verify_baselines["rebuild"],
            verify_baselines,
        ),
        BenchResult(
            "A2",
            f"export ({exported:.2f} s) + offline verify-bundle ({offline:.2f} s) of that run, "
            "medians of its turns",
            exported_verified,
            "s",
            audit_baselines["rebuild"],
            exported_verified / audit_baselines["rebuild"],
            "< 1 x a full rebuild of every read model",
            exported_verified < audit_baselines["rebuild"],
            audit_baselines,
        ),
    ]
