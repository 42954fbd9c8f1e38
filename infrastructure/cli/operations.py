"""Operator commands on projections: status, rebuild and verify (with progress), the worker."""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable, Sequence

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text

from runledger.infrastructure.cli.render import (
    build_outcome_text,
    projection_status_table,
    row_difference_lines,
    table_diff_table,
)
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.views.rebuild import BuildOutcome, VerifyOutcome, default_processes
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


def _progress(err: Console, verb: str) -> Progress:
    return Progress(
        TextColumn(verb + " {task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        _RateColumn(),
        TimeElapsedColumn(),
        console=err,
        transient=False,
    )


def rebuild(
    runtime: StoreRuntime,
    names: Sequence[str],
    err: Console,
    *,
    accept: bool = False,
    drop_old: bool = False,
    restart: bool = False,
    quiet: bool = False,
    processes: int | None = None,
) -> tuple[list[BuildOutcome], float]:
    """Build the named projections blue/green with a progress bar; (outcomes, seconds)."""
    total = runtime.storage.max_position()
    started = time.perf_counter()
    with _progress(err, "rebuilding") as progress:
        progress.disable = quiet
        task = progress.add_task(", ".join(names), total=total)
        outcomes = runtime.rebuild_blue_green(
            names,
            accept=accept,
            drop_old=drop_old,
            restart=restart,
            progress=lambda n: progress.advance(task, n),
            processes=processes or default_processes(),
        )
        read = max((outcome.read for outcome in outcomes), default=0)
        progress.update(task, completed=read, total=max(read, 1))
    return outcomes, time.perf_counter() - started


def print_rebuild(
    outcomes: Sequence[BuildOutcome], seconds: float, out: Console, *, as_json: bool
) -> None:
    """What each rebuild did: a line each (with a diff summary or the first differing rows)."""
    read = max((outcome.read for outcome in outcomes), default=0)
    if as_json:
        document = {
            "events": read,
            "seconds": round(seconds, 3),
            "switched": all(outcome.switched for outcome in outcomes),
            "projections": [outcome.as_json() for outcome in outcomes],
        }
        out.print_json(json.dumps(document))
        return
    rate = read / seconds if seconds > 0 else 0.0
    names = ", ".join(outcome.name for outcome in outcomes)
    out.print(f"rebuilt {names}: {read} events in {seconds:.2f}s ({rate:,.0f} events/s)")
    for outcome in outcomes:
        out.print(build_outcome_text(outcome))
        if outcome.compared == "summary" or not outcome.equal:
            changed = [d for d in outcome.tables if d.added or d.removed or d.changed]
            if changed:
                out.print(table_diff_table(changed, title=f"{outcome.name}: rows changed"))
        if outcome.compared == "rows" and not outcome.equal:
            for line in row_difference_lines(outcome.first_differences):
                out.print(line, markup=False)


def verify(
    runtime: StoreRuntime, names: Sequence[str], err: Console, *, quiet: bool = False
) -> list[VerifyOutcome]:
    """Replay each projection into memory and compare it with the live one, with progress."""
    outcomes = []
    with _progress(err, "verifying") as progress:
        progress.disable = quiet
        for name in names:
            total = runtime.storage.max_position()
            task = progress.add_task(name, total=total)
            outcome = runtime.verify_projections([name], progress=_advancing(progress, task))[0]
            progress.update(task, completed=outcome.position, total=max(outcome.position, 1))
            outcomes.append(outcome)
    return outcomes


def _advancing(progress: Progress, task: TaskID) -> Callable[[int], None]:
    return lambda count: progress.advance(task, count)


def print_verify(outcomes: Sequence[VerifyOutcome], out: Console, *, as_json: bool) -> None:
    """Each projection: equal at its position, or its first differing rows."""
    if as_json:
        document = {
            "equal": all(outcome.equal for outcome in outcomes),
            "projections": [outcome.as_json() for outcome in outcomes],
        }
        out.print_json(json.dumps(document))
        return
    for outcome in outcomes:
        if outcome.equal:
            out.print(
                f"{outcome.name} v{outcome.version}: equal to a replay at position "
                f"{outcome.position} (digest {outcome.live_digest[:16]})"
            )
            continue
        out.print(
            f"{outcome.name} v{outcome.version}: DIFFERS from a replay at position "
            f"{outcome.position}; first differing rows:"
        )
        for line in row_difference_lines(outcome.first_differences):
            out.print(line, markup=False)


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
