"""Running ``runledger bench`` with a progress bar, and printing its results."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from runledger.infrastructure.cli.bench.calibration import (
    Calibration,
    database_times,
    processor_times,
)
from runledger.infrastructure.cli.bench.extra_rows import EXTRA_ROWS
from runledger.infrastructure.cli.bench.runner import Bench, BenchResult, check_reachable

ROW_IDS: Final = (
    *("P1", "P2", "P2b", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12"),
    *(row for row, _ in EXTRA_ROWS),
)
"""Every row ``runledger bench`` may measure (P2 on PostgreSQL only), in the order it runs."""


@dataclass(frozen=True)
class BenchOutcome:
    """What one ``runledger bench`` measured: its backend, its rows, the machine's speed."""

    backend: str
    results: list[BenchResult]
    machine: Calibration


def run_bench(
    url: str,
    *,
    events: int,
    seconds: float,
    only: Sequence[str] = (),
    quick: bool = False,
    full: bool = False,
) -> BenchOutcome:
    """Every measurement on the URL's backend; progress goes to stderr."""
    # A URL the bench cannot measure, or a server it cannot reach, is refused before the
    # progress bar starts.
    check_reachable(url)
    with Progress(
        TextColumn("bench {task.description}"),
        BarColumn(),
        TextColumn("{task.completed}/{task.total}"),
        TimeElapsedColumn(),
        console=Console(stderr=True),
    ) as progress:
        task = progress.add_task("starting", total=0)

        def advance(done: str) -> None:
            progress.update(task, advance=1, description=f"{done} done")

        bench = Bench(
            url,
            events=events,
            seconds=seconds,
            advance=advance,
            only=only,
            quick=quick,
            full=full,
            extra_rows=EXTRA_ROWS,
        )
        progress.update(task, total=len(bench.planned()), description=bench.backend)
        start, database_start = processor_times(), database_times(url)
        results = bench.run()
        machine = Calibration.of(start, processor_times(), database_start, database_times(url))
        return BenchOutcome(bench.backend, results, machine)


def print_bench(outcome: BenchOutcome, out: Console, *, as_json: bool) -> None:
    """The results as a table, or with ``as_json`` as one JSON object on stdout."""
    results = outcome.results
    if as_json:
        document = {
            "backend": outcome.backend,
            "machine": outcome.machine.as_json(),
            "results": [result.as_json() for result in results],
        }
        print(json.dumps(document))
        return
    table = Table(
        title=f"runledger bench on {outcome.backend}",
        caption=outcome.machine.describe(),
        caption_justify="left",
    )
    for column in ("id", "measure", "value", "baselines (ratio)", "goal", "met", "took"):
        table.add_column(column, overflow="fold")
    for result in results:
        table.add_row(
            result.id,
            result.name,
            f"{result.value:,.2f} {result.unit}",
            "\n".join(
                f"{kind} {baseline:,.2f} ({result.value / baseline:.2f} x)"
                for kind, baseline in result.all_baselines().items()
                if baseline
            ),
            result.goal,
            "yes" if result.met else "NO",
            "" if result.seconds is None else f"{result.seconds:,.1f} s",
        )
    out.print(table)
