"""A run's viewer documents at one presentation revision, for a viewer starting over.

The viewer deltas are JSON patches against upstream's target documents (the graph, the
trace timeline, the follow-ups and settings inspectors). A viewer with no cursor, or one out
of retention, loads these documents and then applies the stream after their revision. They
are composed from the store's public queries; the revision is read before and after, and the
reads repeat until both agree, so the documents belong to that revision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

from pydantic_core import to_jsonable_python

from runledger.domain.errors import RunNotFoundError
from runledger.domain.records import LoggedEvent, RunRecord
from runledger.domain.runs import Run, run_aggregate_id
from runledger.infrastructure.store import WorkflowStore
from runledger.projections.viewer_deltas import RUN_WRITES, VIEWER_PAGE_SIZE

ATTEMPTS: Final = 5
LOG_PAGE: Final = 1000
_TRACED: Final = RUN_WRITES | {Run.Created.TOPIC}


def _revision(store: WorkflowStore, run_id: str) -> int:
    # After revision 0 the answer is always "snapshot required", which carries the current one.
    return store.viewer_deltas(run_id, after_revision=0).current_revision


def _run_events(store: WorkflowStore, run: RunRecord) -> list[LoggedEvent]:
    own = str(run_aggregate_id(run.run_id))
    events: list[LoggedEvent] = []
    after = 0
    while True:
        page = store.event_log(after=after, limit=LOG_PAGE, run_id=run.run_id)
        events.extend(e for e in page if e.aggregate_id == own and e.wire_name in _TRACED)
        if len(page) < LOG_PAGE:
            return events
        after = page[-1].position


def _window(items: list[Any]) -> tuple[list[Any], int]:
    start = max(0, len(items) - VIEWER_PAGE_SIZE)
    return items[start:], start


def _graph(run: RunRecord, revision: int, trace_seq: int) -> dict[str, Any]:
    updates = [
        {
            "updateId": update.update_id,
            "seq": update.seq,
            "at": update.published_at,
            "type": update.update_type,
            "key": update.key,
            "attemptId": update.attempt_id,
            "data": update.data,
        }
        for update in run.updates
    ][-VIEWER_PAGE_SIZE:]
    return {
        "presentationRevision": revision,
        "graphRevision": revision,
        "state": {
            "traceSeq": trace_seq,
            "updatedAt": run.updated_at,
            "status": run.status,
            "updates": updates,
            "finishedAt": run.finished_at,
            "currentNode": run.current_node,
            "currentAttemptId": run.current_attempt_id,
            "statusDetail": run.status_detail,
            "paused": run.paused,
            "waitingOn": run.waiting_on,
        },
        "manifest": {"status": run.status, "finishedAt": run.finished_at},
        "live": run.status in ("running", "waiting"),
    }


def _documents(store: WorkflowStore, run_id: str, revision: int) -> dict[str, Any]:
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    events = _run_events(store, run)
    trace = [
        {"seq": seq, "at": event.recorded_at, "type": event.wire_name, "actor": event.actor}
        for seq, event in enumerate(events, start=1)
    ]
    trace_items, trace_start = _window(trace)
    queue = store.follow_up_queue(run_id)
    follow_ups = [
        {
            "followUpId": item.follow_up_id,
            "order": item.order,
            "state": item.state,
            "source": item.source,
        }
        for item in (queue.follow_ups if queue is not None else [])
    ]
    follow_up_items, follow_up_start = _window(follow_ups)
    scopes = [
        {
            "scopeId": scope.scope_id,
            "mountPath": scope.mount_path,
            "invocation": scope.invocation,
            "changeNumber": scope.change_number,
            "settingsHash": scope.settings_hash,
        }
        for scope in store.settings_scopes(run_id)
    ]
    scope_items, scope_start = _window(scopes)
    return {
        "run_id": run_id,
        "revision": revision,
        "run": run,
        "targets": {
            "graph/": _graph(run, revision, events[-1].version if events else 0),
            "timeline/trace:tail": {
                "presentationRevision": revision,
                "items": trace_items,
                "start": trace_start,
                "total": len(trace),
            },
            "inspector/follow-ups": {
                "presentationRevision": revision,
                "followUpQueue": {"items": follow_up_items},
                "followUpStart": follow_up_start,
                "followUpTotal": len(follow_ups),
            },
            "inspector/settings": {
                "presentationRevision": revision,
                "settingsScopes": scope_items,
                "settingsStart": scope_start,
                "settingsTotal": len(scopes),
            },
        },
    }


def viewer_snapshot(store: WorkflowStore, run_id: str) -> Any:
    """The run's viewer documents and the revision they show, as plain JSON values."""
    revision = _revision(store, run_id)
    for _ in range(ATTEMPTS):
        documents = _documents(store, run_id, revision)
        now = _revision(store, run_id)
        if now == revision:
            break
        revision = now
    # Still moving after every attempt: the documents may be a little newer than the revision,
    # which a viewer survives (the deltas after it replace whole values or append).
    return to_jsonable_python(documents)


__all__: Sequence[str] = ["viewer_snapshot"]
