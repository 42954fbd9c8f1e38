"""The bench rows measured outside ``runner``: the one list ``runledger bench`` adds.

Each entry is ``(id, measure)``; ``measure(bench)`` returns the row's ``BenchResult``, or None
when the row does not apply to ``bench.backend`` (see the ``runner`` module docstring). A row
module imports ``Bench`` and ``BenchResult`` from ``runner``; this module imports the row
modules, so ``runner`` never imports them back. Add one line per row, e.g.
``("P3", projections.rebuild_rate),`` after ``from runledger.infrastructure.cli.bench import
projections``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final
from weakref import WeakKeyDictionary

from runledger.infrastructure.cli.bench import (
    audit,
    poolers,
    projections,
    replicas,
    retention,
    serve,
    storage,
    telemetry,
    threads,
)
from runledger.infrastructure.cli.bench.runner import Bench, BenchResult, RowMeasure


class _MeasuredTogether:
    """Rows one measurement gives together (they share a generated store): measured once per
    bench run, by whichever of them comes first."""

    def __init__(self, measure: Callable[[Bench], Sequence[BenchResult]]) -> None:
        self._measure = measure
        self._rows: WeakKeyDictionary[Bench, dict[str, BenchResult]] = WeakKeyDictionary()

    def row(self, row_id: str) -> RowMeasure:
        def measure(bench: Bench) -> BenchResult:
            if bench not in self._rows:
                self._rows[bench] = {row.id: row for row in self._measure(bench)}
            return self._rows[bench][row_id]

        return measure


def _audit(bench: Bench) -> list[BenchResult]:
    if bench.quick:
        sizes = {"events": 2_000, "follow_ups": 200}
    elif bench.full:
        sizes = {}
    else:
        sizes = {"events": 50_000, "follow_ups": 5_000}
    return audit.audit_bench(bench.scratch.url, **sizes)


_AUDIT = _MeasuredTogether(_audit)


def _history(bench: Bench, full: int, default: int) -> int:
    """The generated history's size: the row's own with ``--full``, a smaller one by
    default (the 1M-event rows alone took most of 25 minutes on PostgreSQL), the bench's
    when quick."""
    if bench.quick:
        return bench.events
    return full if bench.full else default


EXTRA_ROWS: Final[list[tuple[str, RowMeasure]]] = [
    ("P13", storage.amplification),
    ("P2t", threads.four_writer_threads),
    (
        "V1",
        lambda bench: projections.verify_all(
            bench.scratch.new_url(), _history(bench, projections.HISTORY_EVENTS, 30_000)
        ),
    ),
    (
        "V2",
        lambda bench: projections.blue_green_ratio(
            bench.scratch.new_url(), _history(bench, projections.HISTORY_EVENTS, 30_000)
        ),
    ),
    (
        "V3",
        lambda bench: projections.peak_rss(
            bench.scratch.new_url(),
            _history(bench, projections.RSS_EVENTS, projections.HISTORY_EVENTS),
            new_baseline_url=bench.scratch.new_url,
        ),
    ),
    ("A1", _AUDIT.row("A1")),
    ("A2", _AUDIT.row("A2")),
    (
        "R1",
        lambda bench: retention.prune_rate(
            bench.scratch.new_url(),
            events=_history(bench, retention.PRUNE_EVENTS, 20_000),
            trees=retention.PRUNE_TREES,
        ),
    ),
    (
        "R2",
        lambda bench: retention.restore_ratio(
            bench.scratch.new_url(),
            follow_ups=200 if bench.quick else bench.history_follow_ups,
        ),
    ),
    ("S1", lambda bench: serve.http_queue_follow_up(bench.scratch.new_url(), bench.seconds)),
    ("S2", lambda bench: serve.command_to_sse_delta(bench.scratch.new_url(), bench.samples)),
    ("O1", telemetry.instrumentation_cost),
    # Present only when the bench URL goes through a transaction pooler with a listen_url.
    ("X1", poolers.through_pooler),
    # Present only when the bench URL names a replica (replica_url=).
    ("X2", replicas.replica_reads),
]
