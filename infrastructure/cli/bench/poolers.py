"""Row X1: commands through a transaction-mode pooler next to the same commands sent to the
server directly, one writer (P1's loop) and four writer processes (P2's), in turns.

A bench URL names one way in; the row needs both, so it is measured only when the URL goes
through a pooler (``pooler=transaction``) and names the server itself as its ``listen_url``
(as a deployment through a transaction pooler does for notifications). Every other row then
measures the server itself (``Scratch``); this row reaches the same scratch database through
the pooler too.
"""

from __future__ import annotations

import statistics
from typing import Final
from urllib.parse import urlencode, urlsplit, urlunsplit

from runledger.infrastructure.cli.bench.baselines import at_once
from runledger.infrastructure.cli.bench.runner import (
    Bench,
    BenchResult,
    _counted_rate,
    _queueing_worker,
)
from runledger.infrastructure.store import open_store

TURNS: Final = 3
"""Each way runs this many turns, alternating, so that the machine's load meets both alike."""


def _pooled(pooled_url: str, direct: str) -> str:
    """The direct scratch database's URL through the pooler: same database, the pooler's
    address and ``pooler=transaction``."""
    return urlunsplit(
        urlsplit(pooled_url)._replace(
            path=urlsplit(direct).path, query=urlencode([("pooler", "transaction")])
        )
    )


def _one_writer(bench: Bench, url: str, prefix: str, seconds: float, first: int) -> float:
    with open_store(url) as store:
        rate, _ = _counted_rate(bench.queueing(store, prefix), seconds, first=first)
    return rate


def _four_writers(url: str, prefix: str, seconds: float) -> float:
    run_ids = [f"{prefix}-{writer}" for writer in range(4)]
    with open_store(url) as store:
        for run_id in run_ids:
            store.create_run(run_id, workflow_name="bench", input={"n": 1})
            store.bind_origin_session(run_id, f"{run_id}-session")
    outcomes: list[tuple[int, float, int, list[str]]] = at_once(
        _queueing_worker,
        [
            (url, run_id, f"{run_id}-session", writer, seconds)
            for writer, run_id in enumerate(run_ids)
        ],
    )
    return sum(outcome[0] for outcome in outcomes) / max(outcome[1] for outcome in outcomes)


def through_pooler(bench: Bench) -> BenchResult | None:
    """X1: P1 and P2 through the pooler vs directly; the row's value is P1's."""
    if bench.backend != "postgresql":
        return None
    if bench.scratch.pooled_url is None:
        return None
    direct = bench.scratch.new_url()
    pooled = _pooled(bench.scratch.pooled_url, direct)
    seconds = bench.seconds / TURNS
    p1: dict[str, list[float]] = {"pooled": [], "direct": []}
    p2: dict[str, list[float]] = {"pooled": [], "direct": []}
    for turn in range(TURNS):
        first = turn * 1_000_000
        p1["pooled"].append(_one_writer(bench, pooled, "x1-pooled", seconds, first))
        p1["direct"].append(_one_writer(bench, direct, "x1-direct", seconds, first))
        p2["pooled"].append(_four_writers(pooled, f"x1p2-pooled-{turn}", seconds))
        p2["direct"].append(_four_writers(direct, f"x1p2-direct-{turn}", seconds))
    rate, baseline = statistics.fmean(p1["pooled"]), statistics.fmean(p1["direct"])
    four, four_direct = statistics.fmean(p2["pooled"]), statistics.fmean(p2["direct"])
    return BenchResult(
        "X1",
        f"queue_follow_up through the transaction pooler vs directly: one writer (P1) "
        f"{rate:.0f} vs {baseline:.0f}/s; 4 writer processes (P2) {four:.0f} vs "
        f"{four_direct:.0f}/s ({four / four_direct:.2f} x)",
        rate,
        "commands/s",
        baseline,
        rate / baseline,
        "report",
        True,
        {"direct": baseline, "p2_pooled": four, "p2_direct": four_direct},
    )
