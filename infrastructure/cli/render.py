"""How the CLI shows things: the narration of a story, and rich tables of runs, logs and read
models. Nothing here issues a command; ``demo_story`` decides what is shown, and other
commands (``projections status``) reuse the same tables."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from runledger.domain.canonical import canonical_json
from runledger.domain.errors import WorkflowError
from runledger.domain.records import (
    FollowUpQueue,
    FollowUpRecord,
    LoggedEvent,
    ProjectionStatus,
    RunRecord,
    TerminalData,
    ViewerDelta,
    WorkflowMessageRecord,
)
from runledger.infrastructure.audit.summaries import summarise as audit_summary
from runledger.infrastructure.views.compare import RowDifference, TableDiff
from runledger.infrastructure.views.rebuild import BuildOutcome

SUMMARY_WIDTH: Final = 60
WIDE_LOG: Final = 110
"""From this console width on, the event log gets a summary column; below it, a second line."""
_LONG_ID: Final = re.compile(
    r"^(follow-up-|workflow-message-|workflow-turn-|restart-)([0-9a-f]{12,})$"
)


class Narrator:
    """Prints the story: numbered section headings and indented steps."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.sections = 0

    def section(self, title: str) -> None:
        """Start the next numbered section."""
        self.sections += 1
        self.console.print()
        self.console.rule(Text(f"{self.sections}. {title}", style="bold"), align="left")

    def step(self, text: str) -> None:
        """Say what one step did."""
        self.console.print(Padding(Text(text), (0, 0, 0, 2), expand=False))

    def rejected(self, error: WorkflowError) -> None:
        """Show the error a step was rejected with."""
        line = Text.assemble("rejected ", (f"[{error.code}] ", "dim"), (error.message, "red"))
        self.console.print(Padding(line, (0, 0, 0, 4), expand=False))


def short_id(identifier: str) -> str:
    """A long hashed id cut to its prefix and 8 hex digits (``follow-up-c007b7b1``)."""
    match = _LONG_ID.match(identifier)
    return f"{match.group(1)}{match.group(2)[:8]}" if match else identifier


def short_hex(identifier: str) -> str:
    """Just the 8 hex digits of a long hashed id (``c007b7b1``), for narrow tables."""
    match = _LONG_ID.match(identifier)
    return match.group(2)[:8] if match else identifier


def actor_label(actor_type: str, actor_id: str | None) -> str:
    """An actor as ``type:id`` (just the type when it has no id)."""
    return actor_type if actor_id is None else f"{actor_type}:{actor_id}"


def clip(text: str, width: int = SUMMARY_WIDTH) -> str:
    """The text on one line, cut to ``width`` characters with an ellipsis."""
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


def _table(title: str | None = None, caption: str | None = None) -> Table:
    return Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )


def run_table(runs: Sequence[RunRecord]) -> Table:
    """Runs with their lineage and status."""
    table = _table("Runs")
    table.add_column("run", overflow="fold")
    table.add_column("lineage")
    table.add_column("status")
    table.add_column("restart #", justify="right")
    table.add_column("session", overflow="fold")
    for run in runs:
        table.add_row(
            short_id(run.run_id),
            run.lineage_kind or "root",
            run.status,
            str(run.restart_number),
            run.origin_session_id or "-",
        )
    return table


def follow_up_table(follow_ups: Sequence[FollowUpRecord]) -> Table:
    """Follow-ups with who queued them and where they ended up."""
    table = _table("Follow-ups")
    table.add_column("run", overflow="fold")
    table.add_column("#", justify="right")
    table.add_column("queued by", overflow="fold")
    table.add_column("state")
    table.add_column("reason", overflow="fold", ratio=1)
    for follow_up in follow_ups:
        table.add_row(
            follow_up.run_id,
            str(follow_up.order),
            actor_label(follow_up.actor.type, follow_up.actor.id),
            follow_up.state,
            follow_up.reason or "",
        )
    return table


def event_log_table(events: Sequence[LoggedEvent], *, width: int = WIDE_LOG) -> Table:
    """Logged events, one row each, with a short summary of the payload.

    On a console narrower than ``WIDE_LOG`` the summary goes on a second line under the
    event's wire name, so 80 columns stay readable.
    """
    wide = width >= WIDE_LOG
    table = _table(caption="times are UTC; aggregate = first 8 hex digits of its UUID")
    table.add_column("pos", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True)
    longest = max((len(event.wire_name) for event in events), default=5)
    if wide:
        table.add_column("event", no_wrap=True)
    else:
        table.add_column("event / summary", overflow="fold", min_width=longest, ratio=1)
    table.add_column("actor", overflow="fold")
    table.add_column("aggregate", no_wrap=True)
    if wide:
        table.add_column("summary", overflow="fold", ratio=1)
    for event in events:
        summary = Text(summarise(event), style="dim")
        cells = [
            str(event.position),
            event.recorded_at.strftime("%H:%M:%S.%f")[:-3],
            event.wire_name if wide else Text.assemble(event.wire_name, "\n", summary),
            actor_label(event.actor.type, event.actor.id),
            event.aggregate_id[:8],
        ]
        table.add_row(*cells, *([summary] if wide else []))
    return table


def follow_up_queue_table(queue: FollowUpQueue, *, width: int = WIDE_LOG) -> Table:
    """A run's follow-up queue in order; delivery is its latest message's status.

    Below ``WIDE_LOG`` columns ids shrink to their 8 hex digits and the source goes under
    the actor, which leaves the reason room at 80 columns.
    """
    wide = width >= WIDE_LOG
    table = _table(f"Follow-up queue of {short_id(queue.run_id)} (for {queue.origin_session_id})")
    table.add_column("#", justify="right")
    table.add_column("follow-up", no_wrap=True)
    table.add_column("queued by" if wide else "queued by / via", overflow="fold")
    if wide:
        table.add_column("source")
    table.add_column("state")
    table.add_column("delivery")
    table.add_column("reason", overflow="fold", ratio=1, min_width=12)
    for follow_up in queue.follow_ups:
        actor = actor_label(follow_up.actor.type, follow_up.actor.id)
        table.add_row(
            str(follow_up.order),
            short_id(follow_up.follow_up_id) if wide else short_hex(follow_up.follow_up_id),
            *(
                [actor, follow_up.source]
                if wide
                else [Text.assemble(actor, "\n", (f"via {follow_up.source}", "dim"))]
            ),
            follow_up.state,
            follow_up.delivery or "-",
            follow_up.reason or "",
        )
    if not queue.follow_ups:
        table.caption = "no follow-ups"
    return table


def terminal_data_table(data: TerminalData) -> Table:
    """The eight fields a terminal presentation is built from; JSON values compact."""
    table = _table(f"Terminal data of {short_id(data.run_id)}")
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold", ratio=1)
    null = Text("null", style="dim")
    fields: list[tuple[str, str | Text]] = [
        ("run_id", data.run_id),
        ("status", data.status),
        ("status_detail", null if data.status_detail is None else data.status_detail),
        ("input", canonical_json(data.input)),
        ("final_output", canonical_json(data.final_output)),
        ("error", null if data.error is None else data.error),
        ("presentation_instructions", data.presentation_instructions),
        ("restart_number", str(data.restart_number)),
    ]
    for name, value in fields:
        table.add_row(name, value)
    return table


def viewer_delta_table(deltas: Sequence[ViewerDelta], *, width: int = WIDE_LOG) -> Table:
    """Viewer deltas, one row each: revision, target, op count and the first op paths."""
    paths = 3 if width >= WIDE_LOG else 2
    table = _table()
    table.add_column("rev", justify="right")
    table.add_column("target", no_wrap=True)
    table.add_column("ops", justify="right")
    table.add_column("first op paths", overflow="fold", ratio=1)
    previous = None
    for delta in deltas:
        shown = [str(op.get("path")) for op in delta.patch[:paths]]
        more = " …" if len(delta.patch) > paths else ""
        revision = delta.presentation_revision
        table.add_row(
            "" if revision == previous else str(revision),
            f"{delta.target_type}/{delta.target_key}" if delta.target_key else delta.target_type,
            str(len(delta.patch)),
            ", ".join(shown) + more,
        )
        previous = revision
    return table


def outbox_table(
    messages: Sequence[WorkflowMessageRecord],
    *,
    next_message_id: str | None = None,
    width: int = WIDE_LOG,
) -> Table:
    """A session's workflow messages in session order; the next deliverable is marked.

    Below ``WIDE_LOG`` columns message ids shrink to their 8 hex digits.
    """
    wide = width >= WIDE_LOG
    table = _table()
    table.add_column("order", justify="right")
    table.add_column("kind")
    table.add_column("status")
    table.add_column("Pi entry", overflow="fold")
    table.add_column("message", no_wrap=True)
    table.add_column("")
    for message in messages:
        is_next = message.workflow_message_id == next_message_id
        table.add_row(
            "-" if message.order is None else str(message.order),
            message.kind,
            message.status,
            message.pi_session_entry_id or "-",
            (short_id if wide else short_hex)(message.workflow_message_id),
            Text("<- next", style="bold") if is_next else "",
        )
    return table


def projection_status_table(
    statuses: Sequence[ProjectionStatus], *, title: str | None = None
) -> Table:
    """Each read model's version, log position, lag, active and building version, last error."""
    table = _table(title)
    table.add_column("name")
    table.add_column("version", justify="right")
    table.add_column("position", justify="right")
    table.add_column("lag", justify="right")
    table.add_column("active", justify="right")
    table.add_column("building", justify="right")
    table.add_column("last error", overflow="fold", ratio=1)
    for status in statuses:
        building = (
            ""
            if status.building_version is None
            else f"v{status.building_version} at {status.building_position}"
        )
        table.add_row(
            status.name,
            str(status.version),
            str(status.position),
            str(status.lag),
            "" if status.active_version is None else f"v{status.active_version}",
            building,
            status.last_error or "",
        )
    return table


def table_diff_table(diffs: Sequence[TableDiff], *, title: str | None = None) -> Table:
    """Rows added, removed and changed per table by a rebuild."""
    table = _table(title)
    table.add_column("table")
    for column in ("added", "removed", "changed"):
        table.add_column(column, justify="right")
    for diff in diffs:
        table.add_row(diff.table, str(diff.added), str(diff.removed), str(diff.changed))
    return table


def row_difference_lines(differences: Sequence[RowDifference]) -> list[str]:
    """Each differing row: table, key, live row and rebuilt row, one line each."""
    lines = []
    for difference in differences:
        live, rebuilt = difference.live, difference.rebuilt
        if live is not None and rebuilt is not None:
            # Only the columns that differ: a row can be wider than any terminal.
            columns = [name for name in rebuilt if live.get(name) != rebuilt.get(name)]
            live = {name: live.get(name) for name in columns}
            rebuilt = {name: rebuilt[name] for name in columns}
        lines.append(f"  {difference.table} {canonical_json(difference.key)}")
        lines.append(f"    live:    {clip(_row_text(live), 200)}")
        lines.append(f"    rebuilt: {clip(_row_text(rebuilt), 200)}")
    return lines


def _row_text(row: dict[str, Any] | None) -> str:
    return "(absent)" if row is None else canonical_json(row)


def build_outcome_text(outcome: BuildOutcome) -> str:
    """One projection's rebuild in a sentence: compared how, switched or not, dropped what."""
    if outcome.compared == "rows":
        found = "rows equal" if outcome.equal else "DIFFERS from the live version"
        compared = f"{found} at position {outcome.position}"
    elif outcome.compared == "summary":
        compared = (
            f"version {outcome.active_version} -> {outcome.version} "
            f"(live at {outcome.live_position}, rebuilt at {outcome.position})"
        )
    else:
        compared = f"not compared (live version stalled or absent), at {outcome.position}"
    if outcome.switched:
        ending = "switched"
        if outcome.dropped:
            ending += ", dropped slot " + ", ".join(str(slot) for slot in outcome.dropped)
    else:
        ending = "NOT switched (pass --accept to switch)"
    return f"{outcome.name} v{outcome.version} (slot {outcome.slot}): {compared}; {ending}"


def summarise(event: LoggedEvent) -> str:
    """A one-line reading of an event's payload: the audit timeline's summary, clipped."""
    return clip(audit_summary(event.wire_name, event.payload))
