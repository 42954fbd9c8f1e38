"""``runledger runs list|show``: find a run, and see one run's record, lineage and read models."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Final

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from runledger.domain.errors import RunNotFoundError
from runledger.domain.records import RunPage, RunRecord, RunSummary
from runledger.domain.values import RunStatus
from runledger.infrastructure.cli.render import follow_up_queue_table, terminal_data_table
from runledger.infrastructure.store import WorkflowStore

WIDE_RUNS: Final = 120
"""From this console width on the runs list is a table; below it, two lines a run."""
LINEAGE_PAGE: Final = 1000
"""Runs of one tree read per page when ``runs show`` looks for a run's children."""


def _time(moment: datetime | None) -> str:
    return "-" if moment is None else moment.strftime("%Y-%m-%d %H:%M:%S")


def _duration(summary: RunSummary) -> str:
    if summary.finished_at is None:
        return "-"
    seconds = int((summary.finished_at - summary.created_at).total_seconds())
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}h{minute:02d}m" if hours else f"{minute}m{second:02d}s"


def _status(summary: RunSummary | RunRecord) -> str:
    return f"{summary.status} (paused)" if summary.paused else summary.status


def _lineage(summary: RunSummary) -> str:
    if summary.lineage_kind == "restart":
        return f"restart {summary.restart_number}"
    return summary.lineage_kind or "root"


def runs_view(page: RunPage, *, width: int) -> RenderableType:
    """A page of the runs list for a console ``width`` wide: a table from ``WIDE_RUNS`` on,
    else two lines a run (long run ids would squeeze every other column to nothing)."""
    return runs_table(page) if width >= WIDE_RUNS else runs_blocks(page)


def runs_table(page: RunPage) -> Table:
    """A page of the runs list: one row a run, in creation order."""
    table = Table(box=box.SIMPLE_HEAD, header_style="bold", pad_edge=False)
    table.add_column("run", overflow="fold", ratio=2)
    table.add_column("workflow", overflow="fold", ratio=1)
    table.add_column("status", no_wrap=True)
    table.add_column("lineage", no_wrap=True)
    table.add_column("session", overflow="fold", ratio=1)
    table.add_column("created", no_wrap=True)
    table.add_column("took", justify="right", no_wrap=True)
    for summary in page.runs:
        table.add_row(
            summary.run_id,
            summary.workflow_name,
            _status(summary),
            _lineage(summary),
            summary.origin_session_id or "-",
            _time(summary.created_at),
            _duration(summary),
        )
    return table


def runs_blocks(page: RunPage) -> Group:
    """A page of the runs list, a run as its id on one line and its facts on the next."""
    parts: list[RenderableType] = []
    for summary in page.runs:
        facts = [
            summary.workflow_name,
            _status(summary),
            _lineage(summary),
            f"session {summary.origin_session_id or '-'}",
            _time(summary.created_at),
            f"took {_duration(summary)}",
        ]
        parts.append(Text(summary.run_id, style="bold", overflow="fold"))
        parts.append(Padding(Text(" · ".join(facts)), (0, 0, 0, 2), expand=False))
    return Group(*parts)


def print_runs(
    store: WorkflowStore,
    out: Console,
    *,
    status: RunStatus | None,
    session_id: str | None,
    root_run_id: str | None,
    after: str | None,
    limit: int,
    as_json: bool,
) -> None:
    """Print one page of the runs list, and how to ask for the next."""
    page = store.list_runs(
        status=status, session_id=session_id, root_run_id=root_run_id, after=after, limit=limit
    )
    if as_json:
        out.print_json(page.model_dump_json())
        return
    if not page.runs:
        out.print("no runs" + (" match" if status or session_id or root_run_id else ""))
        return
    out.print(runs_view(page, width=out.width))
    if page.next_after is not None:
        out.print(f"more: --after {page.next_after}")


def _children(store: WorkflowStore, run: RunRecord) -> list[RunSummary]:
    children: list[RunSummary] = []
    after: str | None = None
    while True:
        page = store.list_runs(root_run_id=run.root_run_id, after=after, limit=LINEAGE_PAGE)
        children.extend(each for each in page.runs if each.parent_run_id == run.run_id)
        if page.next_after is None:
            return children
        after = page.next_after


def _run_table(run: RunRecord, children: Sequence[RunSummary]) -> Table:
    table = Table(box=box.SIMPLE, show_header=False, pad_edge=False)
    table.add_column("field", style="bold")
    table.add_column("value", overflow="fold")
    rows: list[tuple[str, str]] = [
        ("run", run.run_id),
        ("workflow", f"{run.workflow_name} ({run.workflow_ref})"),
        ("title", run.title or "-"),
        ("status", _status(run) + (f": {run.status_detail}" if run.status_detail else "")),
        ("session", f"{run.origin_session_id or '-'} ({run.execution_mode or '-'})"),
        ("lineage", run.lineage_kind or "root"),
        ("parent", run.parent_run_id or "-"),
        ("root", run.root_run_id),
        ("restart #", str(run.restart_number)),
        ("children", ", ".join(f"{c.run_id} ({c.lineage_kind})" for c in children) or "-"),
        ("node", run.current_node or "-"),
        ("created", _time(run.created_at)),
        ("updated", _time(run.updated_at)),
        ("finished", _time(run.finished_at)),
        ("input", json.dumps(run.input, ensure_ascii=False)),
        ("output", "-" if run.final_output is None else json.dumps(run.final_output)),
        ("error", run.error or "-"),
    ]
    for field, value in rows:
        table.add_row(field, value)
    return table


def print_run(store: WorkflowStore, out: Console, run_id: str, *, as_json: bool) -> None:
    """Print one run: its record, lineage, follow-up queue and terminal data."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    children = _children(store, run)
    queue = store.follow_up_queue(run_id)
    terminal = store.terminal_data(run_id)
    if as_json:
        shown: dict[str, Any] = {
            "run": run.model_dump(mode="json"),
            "children": [child.model_dump(mode="json") for child in children],
            "follow_up_queue": None if queue is None else queue.model_dump(mode="json"),
            "terminal_data": None if terminal is None else terminal.model_dump(mode="json"),
        }
        out.print_json(json.dumps(shown, ensure_ascii=False))
        return
    out.print(_run_table(run, children))
    if queue is not None and queue.follow_ups:
        out.print(follow_up_queue_table(queue, width=out.width))
    if terminal is not None:
        out.print(terminal_data_table(terminal))


__all__: Sequence[str] = ["print_run", "print_runs", "runs_view"]
