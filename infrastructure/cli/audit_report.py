"""``runledger audit``: the timeline as a table, the verification's verdict, export with a
progress bar, and the offline bundle check; ``--json`` documents with stable keys.

``audit RUN_ID`` prints one JSON object with exactly the keys of ``AUDIT_KEYS``: ``trail``
(the timeline, or null when only ``--verify``/``--export`` was asked), ``verification``
(``verify_run``'s verdict or null) and ``export`` (``{"path", "events", "lineage", "sha256"}``
or null; the SHA-256 of the bundle file is what an auditor keeps beside it).
``audit verify-bundle FILE`` prints ``verify_bundle``'s verdict.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Final

from rich import box
from rich.console import Console, Group, RenderableType
from rich.padding import Padding
from rich.progress import MofNCompleteColumn, Progress, SpinnerColumn, TextColumn
from rich.table import Table
from rich.text import Text

from runledger.domain.errors import RunArchivedError
from runledger.domain.records import AuditEntry, AuditTrail, AuditVerdict, BundleVerdict
from runledger.infrastructure.audit.verify_bundle import verify_bundle
from runledger.infrastructure.cli.render import actor_label
from runledger.infrastructure.store import WorkflowStore

AUDIT_KEYS: Final = ("trail", "verification", "export")
WIDE_TRAIL: Final = 120
"""From this console width on the timeline is a table; below it, a block of lines an event."""


def audit(
    store: WorkflowStore,
    run_id: str,
    out: Console,
    err: Console,
    *,
    lineage: bool,
    as_of: int | None,
    verify: bool,
    export: Path | None,
    as_json: bool,
) -> bool:
    """Run what was asked and print it; False when the verification found a difference."""
    document: dict[str, Any] = dict.fromkeys(AUDIT_KEYS)
    trail = None
    if not verify and export is None:
        try:
            trail = store.audit_run(run_id, lineage=lineage, as_of=as_of)
        except RunArchivedError as archived:
            # A pruned run is a known run: its timeline is in the bundle its tombstone names.
            print_archived(archived, out, as_json=as_json)
            return True
        document["trail"] = trail.model_dump(mode="json")
    verdict = None
    if verify:
        verdict = store.verify_run(run_id)
        document["verification"] = verdict.model_dump(mode="json")
    if export is not None:
        events = _export(store, run_id, export, err, lineage=lineage, quiet=as_json)
        document["export"] = {
            "path": str(export),
            "events": events,
            "lineage": lineage,
            "sha256": hashlib.sha256(export.read_bytes()).hexdigest(),
        }
    if as_json:
        print(json.dumps(document))
    else:
        if trail is not None:
            out.print(trail_view(trail, width=out.width))
        if verdict is not None:
            out.print(verdict_text(verdict))
        if export is not None:
            out.print(export_text(document["export"]))
    return verdict is None or verdict.ok


def print_archived(archived: RunArchivedError, out: Console, *, as_json: bool) -> None:
    """The tombstone of a pruned run's tree: when, and the bundle holding its history."""
    tombstone = {
        "run_id": archived.run_id,
        "archived_at": archived.archived_at,
        "bundle": archived.bundle,
        "bundle_sha256": archived.bundle_sha256,
    }
    if as_json:
        print(json.dumps({**dict.fromkeys(AUDIT_KEYS), "archived": tombstone}))
        return
    out.print(
        Text.assemble(
            ("archived ", "bold yellow"),
            f"run {archived.run_id} was pruned at {archived.archived_at}; its history is in\n",
            f"{archived.bundle_sha256}  {archived.bundle}",
        ),
        soft_wrap=True,
    )


def export_text(export: dict[str, Any]) -> Text:
    """What an export wrote, and the line an auditor keeps (``sha256sum -c`` reads it)."""
    scope = (
        "the run and its lineage"
        if export["lineage"]
        else "the run alone (--lineage adds its tree)"
    )
    return Text.assemble(
        ("exported ", "bold green"),
        f"{export['events']} events of {scope} to {export['path']}\n",
        f"{export['sha256']}  {export['path']}",
    )


def _export(
    store: WorkflowStore, run_id: str, path: Path, err: Console, *, lineage: bool, quiet: bool
) -> int:
    with Progress(
        SpinnerColumn(),
        TextColumn("exporting {task.description}"),
        MofNCompleteColumn(),
        TextColumn("events chained, then re-projected"),
        console=err,
        disable=quiet,
        transient=False,
    ) as progress:
        task = progress.add_task(run_id, total=None)
        return store.export_run(
            run_id, path, lineage=lineage, progress=lambda n: progress.advance(task, n)
        )


def _trail_title(trail: AuditTrail) -> str:
    scope = f"{len(trail.runs)} runs of its lineage" if trail.lineage else "the run alone"
    cut = "" if trail.as_of is None else f", up to position {trail.as_of}"
    return f"Audit of {trail.run_id} ({scope}{cut})"


def _aggregate_label(entry: AuditEntry) -> str:
    return f"{entry.aggregate_id[:8]} v{entry.version}"


TRAIL_CAPTION: Final = "times are UTC; aggregate = first 8 hex digits of its UUID, then its version"


def trail_view(trail: AuditTrail, *, width: int) -> RenderableType:
    """The timeline, laid out for a console ``width`` columns wide: a table from
    ``WIDE_TRAIL`` columns on, else each event as a short block of lines (a table that
    narrow would cut event names and actors inside words)."""
    return trail_table(trail) if width >= WIDE_TRAIL else trail_blocks(trail)


def trail_table(trail: AuditTrail) -> Table:
    """The timeline as a table: one row per event."""
    table = Table(
        title=_trail_title(trail),
        title_justify="left",
        caption=TRAIL_CAPTION,
        caption_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )
    table.add_column("pos", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True)
    table.add_column("event", no_wrap=True)
    if trail.lineage:
        table.add_column("run", overflow="fold")
    table.add_column("aggregate", no_wrap=True)
    table.add_column("actor", no_wrap=True)
    table.add_column("what changed", overflow="fold", ratio=1)
    for entry in trail.entries:
        cells = [
            str(entry.position),
            entry.recorded_at.strftime("%Y-%m-%d\n%H:%M:%S.%f")[:-3],
            entry.wire_name,
            *([entry.run_id] if trail.lineage else []),
            _aggregate_label(entry),
            actor_label(entry.actor.type, entry.actor.id),
            entry.summary,
        ]
        table.add_row(*cells)
    return table


def trail_blocks(trail: AuditTrail) -> Group:
    """The timeline as blocks: position, time and event on the first line; who, which
    aggregate and run on the second; what changed, wrapped at words, below."""
    parts: list[RenderableType] = [Text(_trail_title(trail), style="bold"), Text("")]
    for entry in trail.entries:
        parts.append(
            Text.assemble(
                (f"{entry.position:>5}  ", "bold"),
                entry.recorded_at.strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "  ",
                (entry.wire_name, "bold"),
            )
        )
        who = [f"by {actor_label(entry.actor.type, entry.actor.id)}", _aggregate_label(entry)]
        if trail.lineage:
            who.append(f"run {entry.run_id}")
        parts.append(Padding(Text(" · ".join(who), style="dim"), (0, 0, 0, 7), expand=False))
        if entry.summary:
            parts.append(Padding(Text(entry.summary), (0, 0, 0, 7), expand=False))
    parts.append(Text(TRAIL_CAPTION, style="dim"))
    return Group(*parts)


def verdict_text(verdict: AuditVerdict) -> Text:
    """The verification's outcome in words."""
    replayed = (
        f"{verdict.events} events of {len(verdict.runs)} runs (the run's whole tree), "
        f"{verdict.aggregates} aggregates replayed, {len(verdict.models)} read models "
        "re-projected"
    )
    difference = verdict.difference
    if difference is None:
        return Text.assemble(("verified ", "bold green"), f"{verdict.run_id}: {replayed}")
    return Text.assemble(
        ("difference ", "bold red"),
        f"in {difference.model}",
        f" table {difference.table}" if difference.table else "",
        f" row {json.dumps(difference.key)}" if difference.key else "",
        *_changed_columns(difference.expected, difference.stored),
        f"\n  ({replayed})",
    )


def _changed_columns(expected: object, stored: object) -> list[str]:
    """Only the columns that differ, when both rows exist; else both sides whole."""
    if isinstance(expected, dict) and isinstance(stored, dict):
        return [
            f"\n  {name}: expected {json.dumps(expected.get(name))}, "
            f"stored {json.dumps(stored.get(name))}"
            for name in sorted(expected.keys() | stored.keys())
            if expected.get(name) != stored.get(name)
        ]
    return [f"\n  expected: {json.dumps(expected)}", f"\n  stored: {json.dumps(stored)}"]


def check_bundle(path: Path, out: Console, *, as_json: bool) -> bool:
    """Check a bundle offline and print the verdict; False when it is not intact."""
    verdict = verify_bundle(path)
    if as_json:
        print(json.dumps(verdict.model_dump(mode="json")))
    else:
        out.print(bundle_text(verdict))
    return verdict.ok


def bundle_text(verdict: BundleVerdict) -> Text:
    """The bundle check's outcome in words."""
    if verdict.ok:
        return Text.assemble(
            ("intact ", "bold green"),
            f"bundle of {verdict.run_id}: {verdict.events} events chain, and re-projecting "
            "them gives the digests it carries",
        )
    where = [
        f"line {verdict.line}" if verdict.line is not None else "",
        f"position {verdict.position}" if verdict.position is not None else "",
        f"aggregate {verdict.aggregate_id} version {verdict.version}"
        if verdict.aggregate_id is not None
        else "",
        f"read model {verdict.model}" if verdict.model is not None else "",
    ]
    located = ", ".join(part for part in where if part)
    return Text.assemble(
        ("not intact ", "bold red"),
        f"bundle: {verdict.problem}",
        f": {verdict.detail}" if verdict.detail else "",
        f" ({located})" if located else "",
    )
