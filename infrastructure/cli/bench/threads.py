"""P2t: writer threads of one process (a host's request handlers) queueing at once, with
group commit and without it, measured in turns in the same run."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Final

from runledger.infrastructure.cli.bench.runner import TURNS, Bench, BenchResult, matched_turns
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore

THREADS: Final = 4


def _threads_rate(commands: list[Callable[[int], None]], seconds: float, first: int) -> float:
    """Commands per second from one thread per ``commands`` entry, started together."""
    counts = [0] * len(commands)
    start = threading.Barrier(len(commands) + 1)

    def work(index: int) -> None:
        start.wait()
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            commands[index](first + counts[index])
            counts[index] += 1

    threads = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(len(commands))]
    for thread in threads:
        thread.start()
    start.wait()
    began = time.perf_counter()
    for thread in threads:
        thread.join()
    return sum(counts) / (time.perf_counter() - began)


def four_writer_threads(bench: Bench) -> BenchResult:
    """Follow-ups per second from four threads of one store, each on its own runs, with
    group commit; next to the same four threads committing one by one and to one thread."""
    seconds = bench.seconds / TURNS
    rates: dict[str, list[float]] = {"grouped": [], "ungrouped": [], "one thread": []}
    commits = requests = 0
    with (
        open_runtime(bench.scratch.new_url()) as grouped,
        open_runtime(bench.scratch.new_url()) as alone,
    ):
        alone.storage.group_commits(False)
        group = grouped.stats
        stores = {"grouped": WorkflowStore(grouped), "ungrouped": WorkflowStore(alone)}
        queues = {
            kind: [bench.queueing(store, f"t{i}") for i in range(THREADS)]
            for kind, store in stores.items()
        }
        single = bench.queueing(stores["grouped"], "single")
        for turn in range(TURNS):
            # Far past the last turn's numbers: every request id stays new.
            first = turn * 10_000_000
            commits -= group.batches
            requests -= group.requests
            rates["grouped"].append(_threads_rate(queues["grouped"], seconds, first))
            commits += group.batches
            requests += group.requests
            rates["ungrouped"].append(_threads_rate(queues["ungrouped"], seconds, first))
            rates["one thread"].append(_threads_rate([single], seconds, first))
    group_size = requests / max(1, commits)
    rate, baselines = matched_turns(rates.pop("grouped"), rates)
    ungrouped = baselines["ungrouped"]
    return BenchResult(
        "P2t",
        f"queue_follow_up, {THREADS} writer threads of one store on their own runs, read "
        f"models current (group commit: {group_size:.1f} commands per commit)",
        rate,
        "commands/s",
        ungrouped,
        rate / ungrouped,
        f">= 1.0 x the {THREADS} threads committing one by one",
        rate >= ungrouped,
        baselines,
    )
