"""Operator commands on projections: status, rebuild (with progress) and the worker."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from runledger.infrastructure.cli.render import projection_status_table
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.views.worker import ProjectionWorker


def print_status(runtime: StoreRuntime, out: Console, *, as_json: bool) -> None:
    """Each projection's name, version, position, lag and last error."""
    statuses = runtime.projection_status()
    if as_json:
        out.print_json(json.dumps([status.model_dump() for status in statuses]))
        return
    out.print(projection_status_table(statuses, title=f"Projections of {runtime.printable_url}"))


class _RateColumn(ProgressColumn):
    """Events per second so far."""

    def render(self, task: Task) -> Text:
        elapsed = task.elapsed or 0.0
        rate = task.completed / elapsed if elapsed > 0 else 0.0
        return Text(f"{rate:,.0f} events/s")


def rebuild(runtime: StoreRuntime, names: Sequence[str], err: Console) -> tuple[int, float]:
    """Replay the log into the named projections with a progress bar; (events, seconds)."""
    total = runtime.storage.max_position()
    started = time.perf_counter()
    with Progress(
        TextColumn("rebuilding {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    ) as progress:
        task = progress.add_task(", ".join(names), total=total)
        read = runtime.rebuild_projections(
            names, progress=lambda n: progress.advance(task, n), processes=os.cpu_count() or 1
        )
        progress.update(task, completed=read, total=max(read, 1))
    return read, time.perf_counter() - started


def run_worker(runtime: StoreRuntime, out: Console, *, poll_seconds: float) -> None:
    """Follow the log until SIGINT or SIGTERM; the page in flight is committed or rolled back."""
    worker = ProjectionWorker(runtime, poll_seconds=poll_seconds)
    previous = {sig: signal.signal(sig, worker.stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    out.print(f"projection worker following {runtime.printable_url} (poll every {poll_seconds}s)")
    try:
        worker.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    out.print("projection worker stopped")
