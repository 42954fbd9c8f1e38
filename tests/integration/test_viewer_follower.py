"""A live viewer that applies every delta to its documents ends where the run is.

The viewer keeps one document per target (graph, timeline, settings and follow-ups
inspectors, the conversation), starts
from the revision-1 snapshot and applies each revision's patches with ``jsonpatch``. Upstream's
``append`` (extend an array) is not RFC 6902, so the viewer registers it as an extra operation.
A ``timeline`` ``session:reload`` tells the viewer to read the session events' new page.
"""

from __future__ import annotations

from collections.abc import MutableSequence
from types import MappingProxyType
from typing import Any

import jsonpatch
from jsonpointer import JsonPointerException

from runledger.domain.records import SessionEventRecord, ViewerDeltas
from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore
from tests.support.sessions import session_binding, session_capture, session_events

SESSION = Actor("session", "session-1")
FOLLOW_UPS = 40
PAGE = 256


class AppendItems(jsonpatch.PatchOperation):
    """``{"op": "append", "path": "/items", "value": [...]}``: extend the array at path."""

    def apply(self, obj: Any) -> Any:
        try:
            target = self.pointer.resolve(obj)
        except JsonPointerException as error:
            raise jsonpatch.JsonPatchConflict(str(error)) from error
        if not isinstance(target, MutableSequence):
            raise jsonpatch.JsonPatchConflict("append needs an array")
        target.extend(self.operation["value"])
        return obj


class ViewerPatch(jsonpatch.JsonPatch):
    operations = MappingProxyType({**jsonpatch.JsonPatch.operations, "append": AppendItems})


def initial_documents() -> dict[tuple[str, str], dict[str, Any]]:
    """What a viewer's snapshot at revision 1 (the run just created) holds."""
    return {
        ("graph", ""): {
            "presentationRevision": 1,
            "graphRevision": 1,
            "state": {"traceSeq": 1, "updatedAt": None, "status": "running"},
            "manifest": {"status": "running"},
            "live": True,
        },
        ("timeline", "trace:tail"): {
            "presentationRevision": 1,
            "items": [{"seq": 1, "type": "run.created"}],
            "start": 0,
            "total": 1,
        },
        ("inspector", "settings"): {
            "presentationRevision": 1,
            "settingsScopes": [],
            "settingsStart": 0,
            "settingsTotal": 0,
        },
        ("inspector", "follow-ups"): {
            "presentationRevision": 1,
            "followUpQueue": {"items": []},
            "followUpStart": 0,
            "followUpTotal": 0,
        },
        ("conversation", "entries:tail"): {"presentationRevision": 1, **empty_page()},
        ("conversation", "capture"): {"presentationRevision": 1, "capture": None},
        ("timeline", "session:tail"): {"presentationRevision": 1, **empty_page()},
    }


def empty_page() -> dict[str, Any]:
    return {"items": [], "start": 0, "total": 0}


def as_sent(record: SessionEventRecord) -> dict[str, Any]:
    """A stored session event record in the shape the host sent it."""
    return {
        "seq": record.seq,
        "at": record.at,
        "type": record.type,
        "nodeId": record.node_id,
        "attemptId": record.attempt_id,
        "payload": record.payload,
    }


def reloaded_page(store: WorkflowStore, run_id: str, patch: list[dict[str, Any]]) -> dict[str, Any]:
    """The 256-event page holding the last of ``total`` events, read back from the store."""
    [total] = [op["value"] for op in patch if op["path"] == "/total"]
    start = (total - 1) // PAGE * PAGE
    records = store.session_events(run_id, start=start, limit=total - start)
    return {"items": [as_sent(record) for record in records], "start": start, "total": total}


def follow(store: WorkflowStore, run_id: str) -> dict[tuple[str, str], dict[str, Any]]:
    documents = initial_documents()
    result = store.viewer_deltas(run_id, after_revision=1)
    assert isinstance(result, ViewerDeltas)
    for delta in result.deltas:
        key = (delta.target_type, delta.target_key)
        if key == ("timeline", "session:reload"):
            key = ("timeline", "session:tail")
            documents[key] = {**documents[key], **reloaded_page(store, run_id, delta.patch)}
        documents[key] = ViewerPatch(delta.patch).apply(documents[key])
    return documents


def play(store: WorkflowStore) -> str:
    store.create_run("run-1", workflow_name="review", input={"pr": 1})
    store.bind_origin_session("run-1", "session-1")
    store.record_progress("run-1", status="running", current_node="lint", current_attempt_id="a1")
    for index in range(FOLLOW_UPS):
        store.queue_follow_up(
            "run-1",
            request_id=f"request-{index}",
            target_session_id="session-1",
            actor=SESSION,
            source="workflow-tool",
            prompt=f"prompt {index}",
        )
    removed = store.follow_up_queue("run-1")
    assert removed is not None
    store.remove_follow_up(
        "run-1", removed.follow_ups[0].follow_up_id, actor=Actor("human"), source="cli"
    )
    store.record_progress("run-1", status="waiting", current_node="review")
    store.finish_run("run-1", status="failed", error="tests failed")
    return "run-1"


def test_the_timeline_a_viewer_builds_is_the_runs_trace(store: WorkflowStore) -> None:
    documents = follow(store, play(store))
    timeline = documents[("timeline", "trace:tail")]
    # run.created, session-bound, two progress writes and the end (accepts are no trace items)
    assert timeline["total"] == 5
    assert [item["seq"] for item in timeline["items"]] == [1, 2, 3, 4, 5]
    assert timeline["items"][-1]["type"] == "run.finished"


def test_the_graph_a_viewer_builds_shows_the_ended_run(store: WorkflowStore) -> None:
    documents = follow(store, play(store))
    graph = documents[("graph", "")]
    assert graph["state"]["status"] == "failed"
    assert graph["live"] is False
    assert graph["state"]["finishedAt"] is not None
    assert graph["manifest"]["status"] == "failed"


def test_the_follow_ups_a_viewer_builds_show_every_state_change(store: WorkflowStore) -> None:
    documents = follow(store, play(store))
    inspector = documents[("inspector", "follow-ups")]
    items = inspector["followUpQueue"]["items"]
    assert inspector["followUpTotal"] == FOLLOW_UPS
    assert [item["order"] for item in items] == list(range(1, FOLLOW_UPS + 1))
    assert [item["state"] for item in items] == ["removed"] + ["cancelled"] * (FOLLOW_UPS - 1)


def test_the_newest_document_is_at_the_current_revision(store: WorkflowStore) -> None:
    run_id = play(store)
    documents = follow(store, run_id)
    current = store.viewer_deltas(run_id, after_revision=1).current_revision
    # Each document carries the revision of the last delta for its target; the end's
    # cancellations come after the run's own last write, so the inspector is newest.
    assert documents[("inspector", "follow-ups")]["presentationRevision"] == current
    assert documents[("graph", "")]["presentationRevision"] < current


def test_the_settings_and_updates_a_viewer_builds_are_the_runs_current_ones(
    store: WorkflowStore,
) -> None:
    store.create_run("run-1", workflow_name="review", input={"pr": 1})
    policy = {"rules": [{"path": "/mode", "permissions": {"human": ["replace"]}}]}
    scope = store.ensure_settings_scope("run-1", settings={"mode": "a"}, policy=policy)
    store.change_settings(
        "run-1",
        scope.scope_id,
        request_id="change-1",
        actor=Actor("human"),
        source="cli",
        patch=[{"op": "replace", "path": "/mode", "value": "b"}],
    )
    for data in (1, 2):
        store.publish_update("run-1", attempt_id="a1", update_type="progress", key="k", data=data)

    documents = follow(store, "run-1")

    [shown] = documents[("inspector", "settings")]["settingsScopes"]
    [current] = store.settings_scopes("run-1")
    assert (shown["scopeId"], shown["changeNumber"], shown["settingsHash"]) == (
        current.scope_id,
        1,
        current.settings_hash,
    )
    [update] = documents[("graph", "")]["state"]["updates"]
    assert (update["key"], update["data"]) == ("k", 2)


def record_session(store: WorkflowStore) -> None:
    """A recorded session: an entry before the first capture, 300 events in batches of
    100 (the third reaches page two), a second entry, the capture complete, then a
    second attempt's binding."""
    store.create_run("run-1", workflow_name="review", input={"pr": 1})
    store.record_session_binding("run-1", session_binding("run-1", "pi-1"))
    store.append_session_entry("run-1", {"id": "e-1", "role": "user"})
    store.update_session_capture("run-1", session_capture("recording", 1, 0))
    for first in (1, 101, 201):
        store.append_session_events("run-1", session_events(first, 100))
    store.append_session_entry("run-1", {"role": "assistant"})
    store.update_session_capture("run-1", session_capture("complete", 2, 300))
    store.record_session_binding("run-1", session_binding("run-1", "pi-2"), attempt_id="attempt-2")


def test_the_session_a_viewer_builds_is_the_recorded_one(store: WorkflowStore) -> None:
    record_session(store)

    documents = follow(store, "run-1")

    session = documents[("graph", "")]["session"]
    assert session["binding"] == session_binding("run-1", "pi-2")
    assert (session["capture"], session["eventPage"]["total"]) == (None, 0)
    entries = documents[("conversation", "entries:tail")]
    assert entries["total"] == 2
    assert [(e["entrySeq"], e["entryId"]) for e in entries["items"]] == [
        (1, "e-1"),
        (2, "entry-2"),
    ]
    assert documents[("conversation", "capture")]["capture"] == session_capture("complete", 2, 300)


def test_the_session_timeline_a_viewer_builds_is_the_last_page_of_events(
    store: WorkflowStore,
) -> None:
    record_session(store)

    timeline = follow(store, "run-1")[("timeline", "session:tail")]

    assert (timeline["start"], timeline["total"]) == (PAGE, 300)
    assert timeline["items"] == session_events(PAGE + 1, 300 - PAGE)


def test_counts_after_the_first_capture_reach_the_viewers_capture(store: WorkflowStore) -> None:
    store.create_run("run-1", workflow_name="review", input={"pr": 1})
    store.record_session_binding("run-1", session_binding("run-1", "pi-1"))
    store.update_session_capture("run-1", session_capture("recording", 0, 0))
    store.append_session_entry("run-1", {"role": "user"})
    store.append_session_events("run-1", session_events(1, 5))

    capture = follow(store, "run-1")[("conversation", "capture")]["capture"]

    assert (capture["entryCount"], capture["eventCount"], capture["lastEventSeq"]) == (1, 5, 5)
