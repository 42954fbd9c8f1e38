"""Benchmarks of versioned read models: verify, blue/green against plain rebuilds, peak RSS.

Rows are ``bench.BenchResult``s, each measured in a scratch database of its own:

- V1: ``projections verify --all`` on a generated history (100k events by default), next to
  a plain rebuild of the same read models;
- V2: a blue/green rebuild of every read model (build beside, compare digests, switch) next
  to a plain rebuild (replay into new tables, nothing compared or switched), one process
  each, on the same history; goal: at most 1.2 times;
- V3: the peak RSS of a blue/green rebuild of every read model over 1M events, measured in
  a process of its own (``VmHWM``), and over 100k events as its baseline; goal ≤ 500 MB and
  within 10 % of the 100k-event figure (memory that does not grow with history).

``python -m runledger.infrastructure.cli.bench.projections URL`` prints the rows as JSON.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from typing import Final

from runledger.infrastructure.cli.bench.memory import peak_rss_mb
from runledger.infrastructure.cli.bench.runner import TURNS, BenchResult, Scratch, matched_turns
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, open_runtime

HISTORY_EVENTS: Final = 100_000
RSS_EVENTS: Final = 1_000_000
RATIO_GOAL: Final = 1.2
RSS_GOAL_MB: Final = 500.0
RSS_GROWTH_GOAL: Final = 1.1
MODULE: Final = "runledger.infrastructure.cli.bench.projections"


def _fill(url: str, events: int) -> None:
    """A generated history of about ``events`` events, no read model projected."""
    with open_runtime(url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(prefix="views").batches(events):
            runtime.storage.events.insert_events(batch)


def _timed_plain(runtime: StoreRuntime) -> float:
    started = time.perf_counter()
    runtime.builds.plain_rebuild(runtime.projection_names())
    return time.perf_counter() - started


def _timed_blue_green(runtime: StoreRuntime) -> float:
    started = time.perf_counter()
    outcomes = runtime.rebuild_blue_green(drop_old=True)
    seconds = time.perf_counter() - started
    if not all(outcome.switched for outcome in outcomes):
        raise AssertionError("a rebuild of unchanged read models must switch")
    return seconds


def verify_all(url: str, events: int) -> BenchResult:
    """V1: seconds to verify every read model, next to a plain rebuild of them."""
    _fill(url, events)
    with open_runtime(url, embedded_projections=False) as runtime:
        plain = _timed_plain(runtime)
        runtime.rebuild_blue_green(drop_old=True)
        started = time.perf_counter()
        outcomes = runtime.verify_projections()
        seconds = time.perf_counter() - started
    if not all(outcome.equal for outcome in outcomes):
        raise AssertionError("a verify of freshly built read models must find them equal")
    return BenchResult(
        "V1",
        f"verify of all read models ({events:,} events)",
        seconds,
        "s",
        plain,
        seconds / plain,
        "reported (plain rebuild as baseline)",
        True,
    )


def blue_green_ratio(url: str, events: int) -> BenchResult:
    """V2: a blue/green rebuild of every read model against a plain one, one process each,
    in ``TURNS`` turns of one of each (``runner.matched_turns``). Two plain rebuilds, then
    two blue/green ones, gave 0.89x and 1.54x in two runs of one evening: load that fell
    on one pair moved the ratio; in turns it meets both sides."""
    _fill(url, events)
    plains: list[float] = []
    blue_greens: list[float] = []
    with open_runtime(url, embedded_projections=False) as runtime:
        runtime.rebuild_blue_green(drop_old=True)  # both measured on a store that has views
        for _ in range(TURNS):
            plains.append(_timed_plain(runtime))
            blue_greens.append(_timed_blue_green(runtime))
    blue_green, baselines = matched_turns(blue_greens, {"plain": plains})
    plain = baselines["plain"]
    ratio = blue_green / plain
    return BenchResult(
        "V2",
        f"blue/green rebuild of all read models vs a plain rebuild ({events:,} events; "
        f"median of {TURNS} turns, one of each)",
        blue_green,
        "s",
        plain,
        ratio,
        f"<= {RATIO_GOAL} x plain rebuild",
        ratio <= RATIO_GOAL,
        baselines,
    )


def peak_rss(
    url: str, events: int, *, new_baseline_url: Callable[[], str] | None = None
) -> BenchResult:
    """V3: the peak RSS of a blue/green rebuild of all read models over ``events``, in its own
    process; over more than ``HISTORY_EVENTS``, next to the same over ``HISTORY_EVENTS`` in
    a database ``new_baseline_url()`` makes then (the goal: memory that does not grow with
    history)."""
    megabytes = _rebuild_rss_mb(url, events)
    name = f"peak RSS of a blue/green rebuild of all read models ({events:,} events)"
    if new_baseline_url is None or events <= HISTORY_EVENTS:
        return BenchResult(
            "V3",
            name,
            megabytes,
            "MB",
            None,
            None,
            f"<= {RSS_GOAL_MB:.0f} MB",
            megabytes <= RSS_GOAL_MB,
        )
    smaller = _rebuild_rss_mb(new_baseline_url(), HISTORY_EVENTS)
    growth = megabytes / smaller
    return BenchResult(
        "V3",
        f"{name}, next to {HISTORY_EVENTS:,} events ({smaller:.1f} MB)",
        megabytes,
        "MB",
        smaller,
        growth,
        f"<= {RSS_GOAL_MB:.0f} MB and <= {RSS_GROWTH_GOAL} x the {HISTORY_EVENTS:,}-event figure",
        megabytes <= RSS_GOAL_MB and growth <= RSS_GROWTH_GOAL,
        {f"{HISTORY_EVENTS:,} events": smaller},
    )


def _rebuild_rss_mb(url: str, events: int) -> float:
    """The peak RSS of a blue/green rebuild over a new history of ``events`` at ``url``."""
    _fill(url, events)
    with open_runtime(url, embedded_projections=False) as runtime:
        # The live models at the head, as on a store in use: the child measures the build.
        runtime.catch_up()
    completed = subprocess.run(  # noqa: S603 - our own module, with the URL given to us
        [sys.executable, "-m", MODULE, "--rss-of-rebuild", url],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
    )
    return float(json.loads(completed.stdout.strip().splitlines()[-1])["peak_rss_mb"])


def _rss_of_rebuild(url: str) -> None:
    with open_runtime(url, embedded_projections=False) as runtime:
        runtime.rebuild_blue_green(drop_old=True)
        # A SQLite build's committer holds pages too: the build's memory is both processes'.
        committer = runtime.builds.committer
        helper = 0.0 if committer is None else peak_rss_mb(committer.pid)
    peak = peak_rss_mb()
    print(json.dumps({"peak_rss_mb": round(peak + helper, 1)}))


def run_projection_bench(
    url: str,
    *,
    events: int = HISTORY_EVENTS,
    rss_events: int = RSS_EVENTS,
    only: Sequence[str] = (),
) -> list[BenchResult]:
    """V1-V3 on the URL's backend (SQLite or PostgreSQL), each in a scratch database."""
    scratch = Scratch(url)
    measures: dict[str, Callable[[], BenchResult]] = {
        "V1": lambda: verify_all(scratch.new_url(), events),
        "V2": lambda: blue_green_ratio(scratch.new_url(), events),
        "V3": lambda: peak_rss(scratch.new_url(), rss_events, new_baseline_url=scratch.new_url),
    }
    try:
        return [measure() for key, measure in measures.items() if not only or key in only]
    finally:
        scratch.close()


def main(arguments: Sequence[str]) -> None:
    """``URL [--events N] [--rss-events N] [--only V1,V2]``; rows as JSON lines."""
    if arguments[:1] == ["--rss-of-rebuild"]:
        _rss_of_rebuild(arguments[1])
        return
    url, options = arguments[0], list(arguments[1:])
    values = dict(zip(options[::2], options[1::2], strict=False))
    rows = run_projection_bench(
        url,
        events=int(values.get("--events", HISTORY_EVENTS)),
        rss_events=int(values.get("--rss-events", RSS_EVENTS)),
        only=[item for item in values.get("--only", "").split(",") if item],
    )
    for row in rows:
        print(json.dumps(row.as_json()))


if __name__ == "__main__":
    main(sys.argv[1:])
