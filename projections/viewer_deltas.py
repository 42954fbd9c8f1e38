"""The viewer-delta stream live viewers follow: presentation revisions and JSON-patch ops.

Upstream §7 adapted to events: ``run.created`` opens a run's viewer at revision 1; every
other run event (a "run write"), every follow-up state change and every settings scope
creation or accepted change adds exactly one revision; a scope moving to a continuation child
adds one to the child and one to the parent. Every inspector revision carries both targets,
``settings`` (delta 0) then ``follow-ups`` (delta 1), as upstream I1 (DESIGN decision 24).
Each session segment event adds one revision with upstream's session targets (§7.4): the
graph's ``/session`` on a binding, ``conversation`` for entries and captures, ``timeline``
``session:tail`` (or ``session:reload``) for event batches.
Revisions are kept in a ring of 256 rows per run, so retention never deletes anything and
applying an event costs one keyed read and two keyed writes.

Storage is compact: the inspector and graph targets re-send whole lists (the last 256
follow-ups, every settings scope, the current updates) on every revision, so a revision row
stores only which of them it shows plus how to undo its own change of them (the item it
inserted, the state it replaced), and the run row holds the lists as they are now. A query
walks back from the run row through the rows it returns, undoing one revision at a time,
and expands each revision to exactly the ops it showed when it was made.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from runledger.domain.errors import (
    InvalidViewerCursorError,
    RunNotFoundError,
    ViewerPageTotalError,
    ViewerProjectionMissingError,
)
from runledger.domain.follow_ups import FollowUp
from runledger.domain.records import SnapshotRequired, ViewerDelta, ViewerDeltas
from runledger.domain.runs import Run
from runledger.domain.session_segments import SessionSegment
from runledger.domain.settings_scopes import SettingsScope
from runledger.domain.values import ViewerTargetType, is_count
from runledger.projections.base import (
    HandledProjection,
    Handler,
    ProjectedEvent,
    Row,
    Table,
    ViewReader,
    ViewWriter,
)

VIEWER_PAGE_SIZE: Final = 256
VIEWER_DELTA_RETENTION: Final = 256

Op = dict[str, Any]

RUN_WRITES: Final[frozenset[str]] = frozenset(
    {
        Run.SessionBound.TOPIC,
        Run.Progressed.TOPIC,
        Run.Paused.TOPIC,
        Run.Resumed.TOPIC,
        Run.PresentationInstructionsSet.TOPIC,
        Run.Finished.TOPIC,
        Run.RestartChildCreated.TOPIC,
        Run.UpdatePublished.TOPIC,
    }
)
"""Run events that show in the viewer. ``run.follow-up-accepted`` is left out: its
``follow-up.queued`` twin already produces the inspector delta, and upstream writes no run
trace event for a queued follow-up."""

FOLLOW_UP_CHANGES: Final[frozenset[str]] = frozenset(
    {FollowUp.Queued.TOPIC, FollowUp.Removed.TOPIC, FollowUp.Cancelled.TOPIC}
)

# Stored event fields that are not the event's own facts, so not part of a trace payload
# (``originator_topic`` is the eventsourcing library's aggregate-class marker).
_ENVELOPE_FIELDS: Final = frozenset({"timestamp", "actor", "run_id", "originator_topic"})
# Upstream §10.2 compaction: large values stay in the run record, the trace says so.
_COMPACTED_FIELDS: Final = (("input", "inputStored"), ("final_output", "finalOutputStored"))


def viewer_tail_patch(old_total: int, items: Sequence[Any]) -> list[Op]:
    """Ops that append ``items`` to a windowed list showing its last 256 items (§7.2)."""
    if not is_count(old_total, None):
        raise ViewerPageTotalError()
    if not items:
        return []
    new_total = old_total + len(items)
    old_start = max(0, old_total - VIEWER_PAGE_SIZE)
    new_start = max(0, new_total - VIEWER_PAGE_SIZE)
    ops: list[Op]
    if len(items) >= VIEWER_PAGE_SIZE:
        ops = [{"op": "replace", "path": "/items", "value": list(items[-VIEWER_PAGE_SIZE:])}]
    else:
        removed = min(new_start - old_start, old_total - old_start)
        ops = [{"op": "remove", "path": "/items/0"} for _ in range(removed)]
        ops.append({"op": "append", "path": "/items", "value": list(items)})
    if new_start != old_start:
        ops.append({"op": "replace", "path": "/start", "value": new_start})
    ops.append({"op": "replace", "path": "/total", "value": new_total})
    return ops


RUNS = Table(
    "rl_vd_runs",
    columns=(
        ("run_id", "text"),
        ("revision", "int"),
        ("retained_from", "int"),
        ("updated_at", "text"),
        ("trace_total", "int"),
        ("graph", "json"),
        ("follow_ups", "json"),
        ("follow_up_total", "int"),
        ("settings", "json"),
        ("session", "json"),
    ),
    key=("run_id",),
    owner="run_id",
)
"""One row per run: its viewer revision and everything the next delta is computed from
(``settings`` lists every scope active on the run, ordered by mount path and invocation;
``session`` counts the run's recorded entries and events and maps each segment id to whether
it has a capture yet)."""

REVISIONS = Table(
    "rl_vd_revisions",
    columns=(
        ("run_id", "text"),
        ("slot", "int"),
        ("revision", "int"),
        ("recorded_at", "compact"),
        ("deltas", "packed"),
        ("undo", "json"),
    ),
    key=("run_id", "slot"),
    # No index on (run_id, revision): a read names the slots of the revisions it wants, so
    # the key finds them, and every revision written would have moved an index entry too.
    dropped_indexes=(("run_id", "revision"),),
    owner="run_id",
    # Written blind, a slot at a time; only queries read them.
    cached=False,
)
"""The retained revisions of a run as a ring: slot = revision % 256. ``deltas`` lists them
in delta-index order, each one of ``"settings"`` and ``"follow-ups"`` (the inspector targets,
shown from the lists), ``{"graph": traceSeq}`` (the graph target, shown from the graph state)
or ``{target_type, target_key, patch}`` (stored as shown, without the revision ops every
patch starts with). ``undo`` turns the run's lists as of this revision into those of the one
before (see ``Shown.undone``)."""


def _graph_state(status: str, finished_at: str | None) -> dict[str, Any]:
    return {
        "status": status,
        "finishedAt": finished_at,
        "currentNode": None,
        "currentAttemptId": None,
        "statusDetail": None,
        "paused": False,
        "waitingOn": None,
        "updates": [],
    }


def _evolved_graph(graph: Mapping[str, Any], event: ProjectedEvent) -> dict[str, Any]:
    """Mirror the Run aggregate's presentation fields (domain/runs.py ``apply`` methods)."""
    # A new dict, never an in-place change: rows from a view may share nested values with
    # rows already written (a shallow copy), and those must not change behind its back.
    evolved = dict(graph)
    name = event.wire_name
    if name == Run.Progressed.TOPIC:
        status = event["status"]
        evolved.update(
            status=status,
            currentNode=event["current_node"],
            currentAttemptId=event["current_attempt_id"],
            waitingOn=event["waiting_on"],
            statusDetail=event["status_detail"],
            # Upstream invariant: a waiting run has a finishedAt, a running one has none.
            finishedAt=event.recorded_at if status == "waiting" else None,
        )
    elif name == Run.Paused.TOPIC:
        evolved.update(paused=True, statusDetail=event["status_detail"])
    elif name == Run.Resumed.TOPIC:
        evolved.update(paused=False, statusDetail=None)
    elif name == Run.UpdatePublished.TOPIC:
        evolved["updates"] = _evolved_updates(graph["updates"], event)
    elif name == Run.Finished.TOPIC:
        evolved.update(
            status=event["status"],
            statusDetail=event["status_detail"],
            paused=False,
            currentNode=None,
            currentAttemptId=None,
            waitingOn=None,
            finishedAt=event.recorded_at,
        )
    return evolved


def _update_item(event: ProjectedEvent) -> dict[str, Any]:
    return {
        "updateId": event["update_id"],
        "seq": event["seq"],
        "at": event.recorded_at,
        "type": event["update_type"],
        "key": event["key"],
        "attemptId": event["attempt_id"],
        "data": event["data"],
    }


def _evolved_updates(
    updates: Sequence[Mapping[str, Any]], event: ProjectedEvent
) -> list[Mapping[str, Any]]:
    """Every current update by sequence: the new one replaces its (type, key) and goes last."""
    kept = [
        item
        for item in updates
        if (item["type"], item["key"]) != (event["update_type"], event["key"])
    ]
    return [*kept, _update_item(event)]


GRAPH_FIELDS: Final = (
    "status",
    "finishedAt",
    "currentNode",
    "currentAttemptId",
    "statusDetail",
    "paused",
    "waitingOn",
)
"""The graph state's fields besides ``updates``."""


def _graph_undo(before: Mapping[str, Any], after: Mapping[str, Any]) -> dict[str, Any]:
    """The old values of what a run write changed: graph fields, and the updates it replaced
    (``[index, item]`` pairs) when it published one."""
    undo: dict[str, Any] = {}
    fields = {name: before[name] for name in GRAPH_FIELDS if before[name] != after[name]}
    if fields:
        undo["graph"] = fields
    if after["updates"] is not before["updates"]:
        new = after["updates"][-1]
        undo["updates"] = [
            [index, item]
            for index, item in enumerate(before["updates"])
            if (item["type"], item["key"]) == (new["type"], new["key"])
        ]
    return undo


def _graph_ops(graph: Mapping[str, Any], trace_seq: int, updated_at: str) -> list[Op]:
    # Upstream runViewerTargets order, without the step/settings/humanDecision fields
    # runledger does not model.
    return [
        {"op": "replace", "path": "/state/traceSeq", "value": trace_seq},
        {"op": "replace", "path": "/state/updatedAt", "value": updated_at},
        {"op": "replace", "path": "/state/status", "value": graph["status"]},
        {
            "op": "add",
            "path": "/state/updates",
            "value": list(graph["updates"][-VIEWER_PAGE_SIZE:]),
        },
        {"op": "add", "path": "/state/finishedAt", "value": graph["finishedAt"]},
        {"op": "add", "path": "/state/currentNode", "value": graph["currentNode"]},
        {"op": "add", "path": "/state/currentAttemptId", "value": graph["currentAttemptId"]},
        {"op": "add", "path": "/state/statusDetail", "value": graph["statusDetail"]},
        {"op": "add", "path": "/state/paused", "value": graph["paused"]},
        {"op": "add", "path": "/state/waitingOn", "value": graph["waitingOn"]},
        {"op": "replace", "path": "/manifest/status", "value": graph["status"]},
        {"op": "add", "path": "/manifest/finishedAt", "value": graph["finishedAt"]},
        {"op": "replace", "path": "/live", "value": graph["status"] in ("running", "waiting")},
    ]


def _trace_item(event: ProjectedEvent, seq: int) -> dict[str, Any]:
    payload = {name: value for name, value in event.data.items() if name not in _ENVELOPE_FIELDS}
    for name, marker in _COMPACTED_FIELDS:
        # The key, not its value, decides: a run.finished without output still has the field.
        if name in payload:
            del payload[name]
            payload[marker] = True
    return {
        "seq": seq,
        "at": event.recorded_at,
        "type": event.wire_name,
        "actor": event["actor"],
        "payload": payload,
    }


def _follow_up_item(event: ProjectedEvent) -> dict[str, Any]:
    return {
        "followUpId": event["follow_up_id"],
        "order": event["order"],
        "state": "queued",
        "source": event["source"],
    }


def _evolved_follow_ups(
    window: Sequence[Mapping[str, Any]], event: ProjectedEvent
) -> tuple[list[Mapping[str, Any]], dict[str, Any]]:
    """The window of the run's last 256 follow-ups after one follow-up change, and how to
    undo that change (``Shown.undone``)."""
    # Copy-on-write, as for the graph: the previous window may be shared with a written row.
    if event.wire_name == FollowUp.Queued.TOPIC:
        item = _follow_up_item(event)
        # Orders arrive ascending (the Run serialises queueing); insert by order regardless.
        index = len(window)
        while index > 0 and window[index - 1]["order"] > item["order"]:
            index -= 1
        grown = [*window[:index], item, *window[index:]]
        if len(grown) > VIEWER_PAGE_SIZE:
            return grown[1:], {"queued": [index, grown[0]]}
        return grown, {"queued": [index]}
    state = "removed" if event.wire_name == FollowUp.Removed.TOPIC else "cancelled"
    follow_up_id = event["follow_up_id"]
    evolved = list(window)
    # Changes mostly hit recent follow-ups, so search from the newest end. One older than
    # the window is not found: the revision still happens and re-sends the same window.
    for index in range(len(evolved) - 1, -1, -1):
        if evolved[index]["followUpId"] == follow_up_id:
            previous = evolved[index]
            evolved[index] = {**previous, "state": state}
            return evolved, {"state": [index, previous["state"]]}
    return evolved, {}


def _follow_up_ops(window: list[Mapping[str, Any]], total: int) -> list[Op]:
    return [
        {"op": "replace", "path": "/followUpQueue", "value": {"items": window}},
        {"op": "replace", "path": "/followUpStart", "value": max(0, total - VIEWER_PAGE_SIZE)},
        {"op": "replace", "path": "/followUpTotal", "value": total},
    ]


def _settings_item(event: ProjectedEvent, change_number: int) -> dict[str, Any]:
    """A scope as the inspector lists it, from its creation or its move."""
    return {
        "scopeId": event["scope_id"],
        "mountPath": event["mount_path"],
        "invocation": event["invocation"],
        "changeNumber": change_number,
        "settingsHash": event["settings_hash"],
    }


def _changed_scopes(
    items: Sequence[Mapping[str, Any]], event: ProjectedEvent
) -> list[Mapping[str, Any]]:
    return [
        {**item, "changeNumber": event["change_number"], "settingsHash": event["after_hash"]}
        if item["scopeId"] == event["scope_id"]
        else item
        for item in items
    ]


def _with_scope(
    items: Sequence[Mapping[str, Any]], item: Mapping[str, Any]
) -> list[Mapping[str, Any]]:
    """The run's scopes with ``item`` added or replaced, ordered by (mount path, invocation)."""
    others = [existing for existing in items if existing["scopeId"] != item["scopeId"]]
    return sorted([*others, item], key=lambda scope: (scope["mountPath"], scope["invocation"]))


def _without_scope(items: Sequence[Mapping[str, Any]], scope_id: str) -> list[Mapping[str, Any]]:
    return [existing for existing in items if existing["scopeId"] != scope_id]


def _settings_ops(items: Sequence[Mapping[str, Any]]) -> list[Op]:
    total = len(items)
    start = max(0, total - VIEWER_PAGE_SIZE)
    return [
        {"op": "replace", "path": "/settingsScopes", "value": list(items[start:])},
        {"op": "replace", "path": "/settingsStart", "value": start},
        {"op": "replace", "path": "/settingsTotal", "value": total},
    ]


INSPECTOR_DELTAS: Final = ("settings", "follow-ups")
"""A revision's stored deltas when it shows the inspector: upstream viewerInspectorTargets,
delta 0 settings, delta 1 follow-ups, each shown from the run's lists."""


def _splice_undo(before: Sequence[Any], after: Sequence[Any]) -> list[Any]:
    """``[at, items, count]`` such that ``before == after[:at] + items + after[at + count:]``:
    the one stretch that differs, for lists that differ in one place (a scope added, changed
    or handed over)."""
    limit = min(len(before), len(after))
    at = 0
    while at < limit and before[at] == after[at]:
        at += 1
    same_tail = 0
    while same_tail < limit - at and before[-1 - same_tail] == after[-1 - same_tail]:
        same_tail += 1
    return [at, list(before[at : len(before) - same_tail]), len(after) - at - same_tail]


def _settings_changed(run: Row, settings: list[Mapping[str, Any]]) -> dict[str, Any]:
    """Give the run its new scopes; the undo of that change."""
    undo = {"settings": _splice_undo(run["settings"], settings)}
    run["settings"] = settings
    return undo


def _empty_page() -> dict[str, Any]:
    return {"items": [], "start": 0, "total": 0}


def _binding_ops(session: Mapping[str, Any], event: ProjectedEvent) -> list[Op]:
    """Upstream writeSessionBinding: the run's first segment brings the graph's session."""
    if session["segments"]:
        return [{"op": "add", "path": "/session/binding", "value": event["binding"]}]
    return [
        {
            "op": "add",
            "path": "/session",
            "value": {
                "binding": event["binding"],
                "presentationRevision": 0,
                "entryPage": _empty_page(),
                "eventPage": _empty_page(),
                "eventsMalformed": False,
                "eventsTornTail": False,
                "capture": None,
                "replayCheckpoint": None,
            },
        }
    ]


def _entry_item(event: ProjectedEvent) -> dict[str, Any]:
    return {
        "segmentId": event["segment_id"],
        "entrySeq": event["entry_seq"],
        "entryId": event["entry_id"],
        "entry": event["entry"],
    }


def crosses_page(old_total: int, new_total: int) -> bool:
    """Whether the last new item is on another 256-item page than the last old one."""
    return max(0, old_total - 1) // VIEWER_PAGE_SIZE != (new_total - 1) // VIEWER_PAGE_SIZE


def _events_ops(old_total: int, records: Sequence[Any]) -> tuple[str, list[Op]]:
    """Upstream appendSessionEventBatch's timeline target: a tail append within a page,
    only the new total when the batch reaches a new page (the viewer reloads that page)."""
    new_total = old_total + len(records)
    total: Op = {"op": "replace", "path": "/total", "value": new_total}
    if crosses_page(old_total, new_total):
        return "session:reload", [total]
    return "session:tail", [{"op": "append", "path": "/items", "value": list(records)}, total]


def _capture_delta(captured: bool, ops: list[Op]) -> dict[str, Any]:
    # A count patch on a capture the host has not written yet has nothing to change (JSON
    # Patch would refuse it), so it is a revision bump only, as upstream's host transitions.
    return {
        "target_type": "conversation",
        "target_key": "capture",
        "patch": ops if captured else [],
    }


SessionDeltas = Callable[[dict[str, Any], dict[str, bool], ProjectedEvent], list[dict[str, Any]]]


def _segment_created(
    session: dict[str, Any], segments: dict[str, bool], event: ProjectedEvent
) -> list[dict[str, Any]]:
    patch = _binding_ops(session, event)
    segments[event["segment_id"]] = False
    return [{"target_type": "graph", "target_key": "", "patch": patch}]


def _entry_appended(
    session: dict[str, Any], segments: dict[str, bool], event: ProjectedEvent
) -> list[dict[str, Any]]:
    old_total: int = session["entries"]
    session["entries"] = old_total + 1
    return [
        {
            "target_type": "conversation",
            "target_key": "entries:tail",
            "patch": viewer_tail_patch(old_total, [_entry_item(event)]),
        },
        _capture_delta(
            segments[event["segment_id"]],
            [{"op": "replace", "path": "/capture/entryCount", "value": event["entry_seq"]}],
        ),
    ]


def _events_appended(
    session: dict[str, Any], segments: dict[str, bool], event: ProjectedEvent
) -> list[dict[str, Any]]:
    old_total: int = session["events"]
    records: list[Any] = event["records"]
    session["events"] = old_total + len(records)
    key, patch = _events_ops(old_total, records)
    # A segment's seqs run 1, 2, ... without gaps, so its last seq is its event count.
    last_seq: int = event["last_seq"]
    return [
        {"target_type": "timeline", "target_key": key, "patch": patch},
        _capture_delta(
            segments[event["segment_id"]],
            [
                {"op": "replace", "path": "/capture/eventCount", "value": last_seq},
                {"op": "add", "path": "/capture/lastEventSeq", "value": last_seq},
            ],
        ),
    ]


def _capture_updated(
    _session: dict[str, Any], segments: dict[str, bool], event: ProjectedEvent
) -> list[dict[str, Any]]:
    segments[event["segment_id"]] = True
    return [_capture_delta(True, [{"op": "add", "path": "/capture", "value": event["capture"]}])]


SESSION_CHANGES: Final[Mapping[str, SessionDeltas]] = {
    SessionSegment.Created.TOPIC: _segment_created,
    SessionSegment.EntryAppended.TOPIC: _entry_appended,
    SessionSegment.EventsAppended.TOPIC: _events_appended,
    SessionSegment.CaptureUpdated.TOPIC: _capture_updated,
}
"""Each session segment event's targets (§7.4), by wire name."""


def _session_change(run: Row, event: ProjectedEvent) -> list[dict[str, Any]]:
    """The session targets of one segment event, updating the run's session state."""
    # Copy-on-write, as for the graph: the previous state is in the row a view handed out.
    session = dict(run["session"])
    segments: dict[str, bool] = dict(session["segments"])
    deltas = SESSION_CHANGES[event.wire_name](session, segments, event)
    session["segments"] = segments
    run["session"] = session
    return deltas


def _run(view: ViewWriter, run_id: str) -> Row:
    run = view.get(RUNS, (run_id,))
    if run is None:
        raise ViewerProjectionMissingError(run_id)
    return run


def _record(
    view: ViewWriter,
    run: Row,
    event: ProjectedEvent,
    deltas: list[Any],
    undo: dict[str, Any],
) -> None:
    revision: int = run["revision"] + 1
    run["revision"] = revision
    run["retained_from"] = max(1, revision - VIEWER_DELTA_RETENTION + 1)
    run["updated_at"] = event.recorded_at
    view.put(RUNS, run)
    # Overwrites revision - 256, which has just left retention.
    view.put(
        REVISIONS,
        {
            "run_id": run["run_id"],
            "slot": revision % VIEWER_DELTA_RETENTION,
            "revision": revision,
            "recorded_at": event.recorded_at,
            "deltas": deltas,
            "undo": undo,
        },
    )


def _run_created(event: ProjectedEvent, view: ViewWriter) -> None:
    status: str = event["status"]
    view.put(
        RUNS,
        {
            "run_id": event["run_id"],
            "revision": 1,
            "retained_from": 1,
            "updated_at": event.recorded_at,
            # run.created is trace item 1 although revision 1 carries no delta: a viewer
            # starts from a snapshot that already shows it.
            "trace_total": 1,
            "graph": _graph_state(status, event.recorded_at if status == "waiting" else None),
            "follow_ups": [],
            "follow_up_total": 0,
            "settings": [],
            "session": {"segments": {}, "entries": 0, "events": 0},
        },
    )


def _run_written(event: ProjectedEvent, view: ViewWriter) -> None:
    run = _run(view, event["run_id"])
    before = run["graph"]
    graph = _evolved_graph(before, event)
    run["graph"] = graph
    old_total: int = run["trace_total"]
    run["trace_total"] = old_total + 1
    deltas = [
        # traceSeq is the run's aggregate version, as upstream's run resource revision.
        {"graph": event.version},
        {
            "target_type": "timeline",
            "target_key": "trace:tail",
            "patch": viewer_tail_patch(old_total, [_trace_item(event, old_total + 1)]),
        },
    ]
    _record(view, run, event, deltas, _graph_undo(before, graph))


def _follow_up_changed(event: ProjectedEvent, view: ViewWriter) -> None:
    run = _run(view, event["run_id"])
    window, undo = _evolved_follow_ups(run["follow_ups"], event)
    run["follow_ups"] = window
    if event.wire_name == FollowUp.Queued.TOPIC:
        run["follow_up_total"] += 1
    _record(view, run, event, list(INSPECTOR_DELTAS), undo)


def _scope_created(event: ProjectedEvent, view: ViewWriter) -> None:
    run = _run(view, event["run_id"])
    undo = _settings_changed(run, _with_scope(run["settings"], _settings_item(event, 0)))
    _record(view, run, event, list(INSPECTOR_DELTAS), undo)


def _scope_changed(event: ProjectedEvent, view: ViewWriter) -> None:
    run = _run(view, event["run_id"])
    undo = _settings_changed(run, _changed_scopes(run["settings"], event))
    _record(view, run, event, list(INSPECTOR_DELTAS), undo)


def _scope_moved(event: ProjectedEvent, view: ViewWriter) -> None:
    """The child gains the scope and the parent loses it: a revision for each."""
    child = _run(view, event["run_id"])
    item = _settings_item(event, event["change_number"])
    undo = _settings_changed(child, _with_scope(child["settings"], item))
    _record(view, child, event, list(INSPECTOR_DELTAS), undo)
    parent = _run(view, event["from_run_id"])
    undo = _settings_changed(parent, _without_scope(parent["settings"], event["scope_id"]))
    _record(view, parent, event, list(INSPECTOR_DELTAS), undo)


def _session_changed(event: ProjectedEvent, view: ViewWriter) -> None:
    run = _run(view, event["run_id"])
    _record(view, run, event, _session_change(run, event), {})


_HANDLERS: Final[Mapping[str, Handler]] = {
    Run.Created.TOPIC: _run_created,
    **dict.fromkeys(RUN_WRITES, _run_written),
    **dict.fromkeys(FOLLOW_UP_CHANGES, _follow_up_changed),
    SettingsScope.Created.TOPIC: _scope_created,
    SettingsScope.Changed.TOPIC: _scope_changed,
    SettingsScope.Moved.TOPIC: _scope_moved,
    **dict.fromkeys(SESSION_CHANGES, _session_changed),
}


class ViewerDeltasProjection(HandledProjection):
    """Presentation revisions per run with their graph, timeline, inspector and conversation
    deltas."""

    name: ClassVar[str] = "viewer_deltas"
    version: ClassVar[int] = 6
    # Version 5 keeps each revision's time compact, version 6 its deltas packed (a batch of
    # recorded session events shows as one append of them all); the rows are version 4's.
    same_rows_since: ClassVar[int | None] = 4
    tables: ClassVar[Sequence[Table]] = (RUNS, REVISIONS)
    rebuild_weight: ClassVar[int] = 3
    handlers = _HANDLERS


@dataclass(frozen=True, slots=True)
class Shown:
    """The lists a run's inspector and graph targets show, as of one revision."""

    settings: list[Mapping[str, Any]]
    follow_ups: list[Mapping[str, Any]]
    follow_up_total: int
    graph: Mapping[str, Any]

    @classmethod
    def now(cls, run: Row) -> Shown:
        """What the run shows at its current revision."""
        return cls(run["settings"], run["follow_ups"], run["follow_up_total"], run["graph"])

    def undone(self, undo: Mapping[str, Any]) -> Shown:
        """What the run showed one revision earlier, given that revision's ``undo``."""
        settings, follow_ups, total, graph = (
            self.settings,
            self.follow_ups,
            self.follow_up_total,
            self.graph,
        )
        if "settings" in undo:
            at, items, count = undo["settings"]
            settings = [*settings[:at], *items, *settings[at + count :]]
        if "queued" in undo:
            index, *dropped = undo["queued"]
            grown = [*dropped, *follow_ups]
            follow_ups = [*grown[:index], *grown[index + 1 :]]
            total -= 1
        if "state" in undo:
            index, state = undo["state"]
            follow_ups = list(follow_ups)
            follow_ups[index] = {**follow_ups[index], "state": state}
        if "graph" in undo or "updates" in undo:
            graph = {**graph, **undo.get("graph", {})}
            if "updates" in undo:
                updates = list(graph["updates"][:-1])
                for index, item in undo["updates"]:
                    updates.insert(index, item)
                graph["updates"] = updates
        return Shown(settings, follow_ups, total, graph)

    def patch(self, stored: Any, recorded_at: str) -> tuple[ViewerTargetType, str, list[Op]]:
        """One stored delta as shown: its target type and key, and its ops (without the
        revision ops)."""
        if stored == "settings":
            return "inspector", "settings", _settings_ops(self.settings)
        if stored == "follow-ups":
            return "inspector", "follow-ups", _follow_up_ops(self.follow_ups, self.follow_up_total)
        if "graph" in stored:
            return "graph", "", _graph_ops(self.graph, stored["graph"], recorded_at)
        return stored["target_type"], stored["target_key"], stored["patch"]


def _revision_deltas(run_id: str, row: Row, shown: Shown) -> list[ViewerDelta]:
    """A revision's deltas as it showed them, each patch led by the revision ops."""
    revision: int = row["revision"]
    recorded_at: str = row["recorded_at"]
    prefix: list[Op] = [{"op": "replace", "path": "/presentationRevision", "value": revision}]
    graph_prefix = [*prefix, {"op": "replace", "path": "/graphRevision", "value": revision}]
    deltas = []
    for index, stored in enumerate(row["deltas"]):
        target_type, target_key, patch = shown.patch(stored, recorded_at)
        head = graph_prefix if target_type == "graph" else prefix
        deltas.append(
            ViewerDelta(
                run_id=run_id,
                presentation_revision=revision,
                delta_index=index,
                target_type=target_type,
                target_key=target_key,
                patch=[*head, *patch],
                recorded_at=row["recorded_at"],
            )
        )
    return deltas


def viewer_deltas(
    reader: ViewReader, run_id: str, *, after_revision: int
) -> ViewerDeltas | SnapshotRequired:
    """The deltas after ``after_revision``, or ``snapshot_required`` when they are gone (§7.1)."""
    # Any integer revision is a cursor upstream: one beyond the head gets a snapshot.
    if not is_count(after_revision, None):
        raise InvalidViewerCursorError()
    run = reader.get(RUNS, (run_id,))
    if run is None:
        raise RunNotFoundError(run_id)
    current: int = run["revision"]
    retained_from: int = run["retained_from"]
    snapshot = SnapshotRequired(current_revision=current, retained_from_revision=retained_from)
    if after_revision == 0 or after_revision > current or after_revision < retained_from - 1:
        return snapshot
    wanted = range(after_revision + 1, current + 1)
    rows = reader.scan(
        REVISIONS,
        equals={"run_id": run_id},
        within=(
            None
            if len(wanted) >= VIEWER_DELTA_RETENTION
            else {"slot": [revision % VIEWER_DELTA_RETENTION for revision in wanted]}
        ),
    )
    rows.sort(key=lambda row: row["revision"])
    # Upstream's gap rule: a viewer must get every revision or start over. It also proves the
    # rows are those of the run row read above, which the walk back starts from.
    if [row["revision"] for row in rows] != list(wanted):
        return snapshot
    shown = Shown.now(run)
    newest_first: list[list[ViewerDelta]] = []
    for row in reversed(rows):
        newest_first.append(_revision_deltas(run_id, row, shown))
        shown = shown.undone(row["undo"])
    return ViewerDeltas(
        current_revision=current,
        retained_from_revision=retained_from,
        deltas=[delta for deltas in reversed(newest_first) for delta in deltas],
    )
