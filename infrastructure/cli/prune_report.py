"""``runledger prune``: archive and prune settled run trees, with a progress bar, a table of
what went (run ids, events, bundle and SHA-256) and what stayed (the first reason), or JSON;
``runledger restore``: what came back."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Final

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from runledger.domain.errors import InvalidCutoffTextError
from runledger.domain.records import PruneReport, RestoredTree
from runledger.infrastructure.audit.retention import archive_folder
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore

_DAYS: Final = re.compile(r"([0-9]{1,6})d")


def parse_cutoff(text: str, now: datetime) -> datetime:
    """``30d`` (30 days before ``now``), or an ISO date (its midnight) or datetime; a value
    without a zone is UTC."""
    days = _DAYS.fullmatch(text.strip())
    if days is not None:
        return now - timedelta(days=int(days.group(1)))
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise InvalidCutoffTextError(value=text) from None
    if isinstance(moment, datetime) and moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment


def prune(
    runtime: StoreRuntime,
    err: Console,
    *,
    settled_before: datetime,
    archive: Path,
    limit: int | None,
    dry_run: bool,
    quiet: bool,
) -> PruneReport:
    """``prune_runs`` with a bar of the trees done."""
    # Refused before the bar is drawn: a bad folder is one error line, nothing else.
    archive_folder(archive)
    columns = (
        TextColumn("pruning run trees"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    with Progress(*columns, console=err, transient=False, disable=quiet or dry_run) as progress:
        task = progress.add_task("trees", total=None)
        # Trees are judged as the prune reaches them, so the bar counts without a total.
        return WorkflowStore(runtime).prune_runs(
            settled_before=settled_before,
            archive=archive,
            limit=limit,
            dry_run=dry_run,
            progress=lambda done: progress.advance(task, done),
        )


def print_prune(report: PruneReport, out: Console, *, as_json: bool) -> None:
    """The trees archived (or that would be) and kept, and the totals."""
    if as_json:
        print(json.dumps(report.model_dump(mode="json")))
        return
    verb = "would archive" if report.dry_run else "archived"
    gone = Table(title=f"Run trees {verb} (settled before {report.settled_before.isoformat()})")
    for column in ("root", "runs", "events", *(() if report.dry_run else ("bundle", "sha256"))):
        gone.add_column(column, overflow="fold")
    for tree in report.prunable:
        gone.add_row(tree.root_run_id, " ".join(tree.run_ids), str(tree.events))
    for archived in report.archived:
        gone.add_row(
            archived.root_run_id,
            " ".join(archived.run_ids),
            str(archived.events),
            archived.bundle,
            archived.bundle_sha256,
        )
    out.print(gone)
    if report.kept:
        kept = Table(title="Run trees kept")
        for column in ("root", "reason", "detail"):
            kept.add_column(column, overflow="fold")
        for stayed in report.kept:
            kept.add_row(stayed.root_run_id, stayed.reason, stayed.detail)
        out.print(kept)
    out.print(
        f"{verb} {report.trees} tree(s), {report.runs} run(s), {report.events} event(s); "
        f"kept {len(report.kept)} tree(s)",
        markup=False,
    )
    if report.trees and not report.dry_run:
        out.print("SQLite gives the space back with `runledger compact`.", markup=False)


def print_restore(restored: RestoredTree, out: Console, *, as_json: bool) -> None:
    """The tree put back: its runs, events, and the bundle they came from."""
    if as_json:
        print(json.dumps(restored.model_dump(mode="json")))
        return
    out.print(
        f"restored run tree {restored.root_run_id} ({len(restored.run_ids)} run(s): "
        f"{' '.join(restored.run_ids)}), {restored.events} event(s) from {restored.bundle} "
        f"(sha256 {restored.bundle_sha256}); its rows re-projected to the bundle's digests",
        markup=False,
    )
