"""The viewer-delta projection: revisions, graph/timeline/inspector patches, retention, cursors.

The real domain writes the events (memory store, fake clock); the projection replays the log
into a dict-backed view, which the query then reads. Upstream scenarios I1-I5 (§11).
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from runledger.domain.errors import (
    InvalidViewerCursorError,
    RunNotFoundError,
    ViewerPageTotalError,
)
from runledger.domain.records import SnapshotRequired, ViewerDelta, ViewerDeltas
from runledger.domain.session_segments import segment_id_for
from runledger.domain.values import Actor
from runledger.projections.events import projected
from runledger.projections.viewer_deltas import (
    REVISIONS,
    ViewerDeltasProjection,
    crosses_page,
    viewer_deltas,
    viewer_tail_patch,
)
from tests.support.fake_view import FakeView, StoreWithLog, open_memory_store_with_log, project_log
from tests.support.sessions import session_binding, session_capture, session_events
from tests.support.viewer_pages import workflow_page_start

RUN = "run-1"
SESSION = "session-1"
WT = "workflow-tool"
HUMAN = Actor("human", "user-1")

CHANGES = 300
"""I4: run writes after initialisation."""


@pytest.fixture
def store() -> Iterator[StoreWithLog]:
    with open_memory_store_with_log() as opened:
        yield opened


@pytest.fixture(scope="module")
def busy_view() -> Iterator[FakeView]:
    """A run created (revision 1) and then changed 300 times: one per revision."""
    with open_memory_store_with_log() as opened:
        create(opened)
        for number in range(CHANGES):
            opened.record_progress(RUN, status="running", current_node=f"node-{number}")
        yield project_log(ViewerDeltasProjection(), opened.storage)


@pytest.fixture(scope="module")
def many_follow_ups() -> Iterator[StoreWithLog]:
    """A running run with 300 queued follow-ups (I2)."""
    with open_memory_store_with_log() as opened:
        running_run(opened)
        for number in range(1, 301):
            queue(opened, f"follow-{number}")
        yield opened


# Given-steps of the §11 notation (R: a running run bound to "session-1"). Kept here rather than
# shared because tests/support/scenario.py was not yet committed when this module was written.


def create(store: StoreWithLog) -> None:
    store.create_run(RUN, workflow_name="echo", input={"task": "reply"})


def running_run(store: StoreWithLog, *, node: str = "hold") -> None:
    create(store)
    store.bind_origin_session(RUN, SESSION)
    store.record_progress(RUN, status="running", current_node=node)


def waiting_run(store: StoreWithLog, *, node: str) -> None:
    running_run(store, node=node)
    store.record_progress(RUN, status="waiting", waiting_on=node)


def queued_id(store: StoreWithLog, request_id: str = "follow-1") -> str:
    queued = store.queue_follow_up(
        RUN,
        request_id=request_id,
        target_session_id=SESSION,
        actor=Actor("session", SESSION),
        source=WT,
        prompt="First task",
    )
    return queued.follow_up.follow_up_id


def queue(store: StoreWithLog, request_id: str = "follow-1") -> None:
    queued_id(store, request_id)


def project(store: StoreWithLog) -> FakeView:
    return project_log(ViewerDeltasProjection(), store.storage)


def deltas_after(view: FakeView, after: int, run_id: str = RUN) -> ViewerDeltas:
    result = viewer_deltas(view, run_id, after_revision=after)
    assert isinstance(result, ViewerDeltas), result
    return result


def latest(store: StoreWithLog, run_id: str = RUN) -> list[ViewerDelta]:
    """The deltas of the run's newest revision."""
    view = project(store)
    current = viewer_deltas(view, run_id, after_revision=1).current_revision
    return deltas_after(view, current - 1, run_id).deltas


def latest_target(
    store: StoreWithLog, target_type: str, target_key: str | None = None
) -> ViewerDelta:
    [delta] = [
        delta
        for delta in latest(store)
        if delta.target_type == target_type and target_key in (None, delta.target_key)
    ]
    return delta


def ops(delta: ViewerDelta) -> dict[str, Any]:
    """The patch as path -> value (every path occurs once in these patches)."""
    return {op["path"]: op.get("value") for op in delta.patch}


def replace(path: str, value: Any) -> dict[str, Any]:
    return {"op": "replace", "path": path, "value": value}


def append(path: str, value: Any) -> dict[str, Any]:
    return {"op": "append", "path": path, "value": value}


REMOVE_FIRST = {"op": "remove", "path": "/items/0"}


def event_time(store: StoreWithLog, wire_name: str) -> str:
    """The stored ISO time of the run's last event with this wire name."""
    [*_, event] = [e for e in store.event_log(run_id=RUN) if e.wire_name == wire_name]
    return event.recorded_at.isoformat()


def last_event_time(store: StoreWithLog) -> str:
    return store.event_log(run_id=RUN)[-1].recorded_at.isoformat()


# -- revisions --------------------------------------------------------------------------------


def test_a_new_run_is_at_revision_one_with_no_deltas(store: StoreWithLog) -> None:
    create(store)

    assert deltas_after(project(store), 1) == ViewerDeltas(
        current_revision=1, retained_from_revision=1, deltas=[]
    )


def test_each_run_write_adds_one_revision_with_a_graph_and_a_timeline_delta(
    store: StoreWithLog,
) -> None:
    create(store)
    store.bind_origin_session(RUN, "session-1")

    [graph, timeline] = deltas_after(project(store), 1).deltas

    assert (graph.presentation_revision, graph.delta_index, graph.target_type) == (2, 0, "graph")
    assert graph.target_key == ""
    assert (timeline.presentation_revision, timeline.delta_index) == (2, 1)
    assert (timeline.target_type, timeline.target_key) == ("timeline", "trace:tail")


def test_queueing_a_follow_up_adds_one_revision_only(store: StoreWithLog) -> None:
    running_run(store)
    before = viewer_deltas(project(store), RUN, after_revision=1).current_revision

    queue(store)

    result = deltas_after(project(store), before)
    assert result.current_revision == before + 1
    assert [(d.target_type, d.target_key) for d in result.deltas] == [
        ("inspector", "settings"),
        ("inspector", "follow-ups"),
    ]


def test_deltas_are_recorded_at_their_event_time(store: StoreWithLog) -> None:
    running_run(store)
    queue(store)

    [queued] = [e for e in store.event_log(run_id=RUN) if e.wire_name == "follow-up.queued"]
    assert [delta.recorded_at for delta in latest(store)] == [queued.recorded_at] * 2


# -- I4: retention and cursors ----------------------------------------------------------------


def test_three_hundred_changes_retain_the_last_256_revisions(busy_view: FakeView) -> None:
    result = viewer_deltas(busy_view, RUN, after_revision=301)

    assert (result.current_revision, result.retained_from_revision) == (301, 46)


def test_a_cursor_just_before_retention_gets_every_retained_revision(busy_view: FakeView) -> None:
    result = deltas_after(busy_view, 45)

    assert [(d.presentation_revision, d.delta_index) for d in result.deltas] == [
        (revision, index) for revision in range(46, 302) for index in (0, 1)
    ]


@pytest.mark.parametrize("after", [44, 0, 302])
def test_a_cursor_outside_retention_requires_a_snapshot(busy_view: FakeView, after: int) -> None:
    assert viewer_deltas(busy_view, RUN, after_revision=after) == SnapshotRequired(
        current_revision=301, retained_from_revision=46
    )


def test_a_current_cursor_gets_no_deltas(busy_view: FakeView) -> None:
    assert deltas_after(busy_view, 301).deltas == []


def test_retention_keeps_one_row_per_retained_revision(busy_view: FakeView) -> None:
    assert busy_view.count(REVISIONS, equals={"run_id": RUN}) == 256


@pytest.mark.parametrize("after", [-1, True, 1.5, "1", None])
def test_a_cursor_that_is_not_a_non_negative_integer_is_rejected(
    busy_view: FakeView, after: Any
) -> None:
    with pytest.raises(
        InvalidViewerCursorError, match=r"^Viewer cursor must be a non-negative integer$"
    ):
        viewer_deltas(busy_view, RUN, after_revision=after)


def test_an_unknown_run_is_not_found(busy_view: FakeView) -> None:
    with pytest.raises(RunNotFoundError, match=r"^Workflow run not found: run-unknown$"):
        viewer_deltas(busy_view, "run-unknown", after_revision=1)


# -- graph target -----------------------------------------------------------------------------


def test_the_graph_delta_carries_the_full_run_state_in_upstream_order(
    store: StoreWithLog,
) -> None:
    running_run(store, node="hold")

    graph = latest_target(store, "graph")

    at = last_event_time(store)
    assert graph.patch == [
        replace("/presentationRevision", 3),
        replace("/graphRevision", 3),
        replace("/state/traceSeq", 3),
        replace("/state/updatedAt", at),
        replace("/state/status", "running"),
        {"op": "add", "path": "/state/updates", "value": []},
        {"op": "add", "path": "/state/finishedAt", "value": None},
        {"op": "add", "path": "/state/currentNode", "value": "hold"},
        {"op": "add", "path": "/state/currentAttemptId", "value": None},
        {"op": "add", "path": "/state/statusDetail", "value": None},
        {"op": "add", "path": "/state/paused", "value": False},
        {"op": "add", "path": "/state/waitingOn", "value": None},
        replace("/manifest/status", "running"),
        {"op": "add", "path": "/manifest/finishedAt", "value": None},
        replace("/live", True),
    ]


def test_a_waiting_run_shows_what_it_waits_on_and_stays_live(store: StoreWithLog) -> None:
    waiting_run(store, node="wait")

    state = ops(latest_target(store, "graph"))

    at = last_event_time(store)
    assert state["/state/status"] == "waiting"
    assert state["/state/currentNode"] is None
    assert state["/state/waitingOn"] == "wait"
    assert state["/state/finishedAt"] == at
    assert state["/manifest/finishedAt"] == at
    assert state["/live"] is True


def test_a_finished_run_is_no_longer_live(store: StoreWithLog) -> None:
    running_run(store)
    store.finish_run(RUN, status="completed", final_output={"answer": 42})

    state = ops(latest_target(store, "graph"))

    assert state["/state/status"] == state["/manifest/status"] == "completed"
    assert state["/state/finishedAt"] == event_time(store, "run.finished")
    assert state["/state/currentNode"] is None
    assert state["/live"] is False


def test_a_paused_run_shows_paused_with_its_detail(store: StoreWithLog) -> None:
    running_run(store)
    store.pause_run(RUN, status_detail="Paused by the user")

    state = ops(latest_target(store, "graph"))

    assert (state["/state/paused"], state["/state/statusDetail"]) == (True, "Paused by the user")


def test_the_trace_seq_is_the_run_aggregate_version(store: StoreWithLog) -> None:
    running_run(store)
    queue(store)
    store.pause_run(RUN)

    paused = store.event_log(run_id=RUN)[-1]
    assert paused.wire_name == "run.paused"
    assert ops(latest_target(store, "graph"))["/state/traceSeq"] == paused.version


# -- timeline target --------------------------------------------------------------------------


def test_the_first_run_write_appends_trace_item_two_after_run_created(
    store: StoreWithLog,
) -> None:
    create(store)
    store.bind_origin_session(RUN, "session-1")

    timeline = latest_target(store, "timeline")

    item = {
        "seq": 2,
        "at": last_event_time(store),
        "type": "run.session-bound",
        "actor": {"type": "host", "id": None},
        "payload": {"session_id": "session-1", "execution_mode": "interactive"},
    }
    assert timeline.patch == [
        replace("/presentationRevision", 2),
        append("/items", [item]),
        replace("/total", 2),
    ]


def test_trace_items_store_no_final_output(store: StoreWithLog) -> None:
    running_run(store)
    store.finish_run(RUN, status="completed", final_output={"answer": 42})

    [item] = ops(latest_target(store, "timeline"))["/items"]

    assert "final_output" not in item["payload"]
    assert item["payload"]["finalOutputStored"] is True


def test_the_timeline_appends_while_it_holds_at_most_256_items(busy_view: FakeView) -> None:
    [_, timeline] = deltas_after(busy_view, 255).deltas[:2]

    assert timeline.presentation_revision == 256
    assert [op["op"] for op in timeline.patch] == ["replace", "append", "replace"]
    assert timeline.patch[-1] == replace("/total", 256)


def test_the_timeline_drops_its_first_item_past_256_items(busy_view: FakeView) -> None:
    [_, timeline] = deltas_after(busy_view, 256).deltas[:2]

    assert timeline.presentation_revision == 257
    [item] = timeline.patch[2]["value"]
    assert timeline.patch == [
        replace("/presentationRevision", 257),
        REMOVE_FIRST,
        append("/items", [item]),
        replace("/start", 1),
        replace("/total", 257),
    ]
    assert item["seq"] == 257


# -- inspector follow-ups target --------------------------------------------------------------


def test_two_follow_ups_show_in_the_follow_ups_inspector_target(store: StoreWithLog) -> None:
    running_run(store)
    first = queued_id(store, "follow-1")
    second = queued_id(store, "follow-2")

    [settings, inspector] = latest(store)

    assert (settings.target_type, settings.target_key) == ("inspector", "settings")
    assert (inspector.target_type, inspector.target_key) == ("inspector", "follow-ups")
    revision = inspector.presentation_revision
    assert settings.patch == [
        replace("/presentationRevision", revision),
        replace("/settingsScopes", []),
        replace("/settingsStart", 0),
        replace("/settingsTotal", 0),
    ]
    assert inspector.patch == [
        replace("/presentationRevision", revision),
        replace(
            "/followUpQueue",
            {
                "items": [
                    {"followUpId": first, "order": 1, "state": "queued", "source": WT},
                    {"followUpId": second, "order": 2, "state": "queued", "source": WT},
                ]
            },
        ),
        replace("/followUpStart", 0),
        replace("/followUpTotal", 2),
    ]


def test_three_hundred_follow_ups_show_the_last_256(many_follow_ups: StoreWithLog) -> None:
    inspector = ops(latest_target(many_follow_ups, "inspector", "follow-ups"))

    items = inspector["/followUpQueue"]["items"]
    assert (inspector["/followUpStart"], len(items), inspector["/followUpTotal"]) == (44, 256, 300)
    assert [item["order"] for item in items] == list(range(45, 301))


def test_a_follow_up_revision_stores_what_it_changed_not_the_window(
    many_follow_ups: StoreWithLog,
) -> None:
    rows = project(many_follow_ups).scan(REVISIONS, equals={"run_id": RUN}, order_by="revision")

    newest = rows[-1]
    # The 300th follow-up pushed the 44th out of the 256-item window: the row keeps that one
    # item to undo the change, and the window itself only in the run row.
    assert newest["deltas"] == ["settings", "follow-ups"]
    assert newest["undo"]["queued"][0] == 256  # inserted after the old window's 256 items
    assert newest["undo"]["queued"][1]["order"] == 44
    assert len(json.dumps(newest)) < 400


def test_every_retained_revision_of_a_long_window_expands_to_its_own_window(
    many_follow_ups: StoreWithLog,
) -> None:
    view = project(many_follow_ups)
    current = viewer_deltas(view, RUN, after_revision=0).current_revision

    page = deltas_after(view, current - 200)

    windows = [
        ops(delta)["/followUpQueue"]["items"]
        for delta in page.deltas
        if delta.target_key == "follow-ups"
    ]
    totals = [len(window) for window in windows]
    assert [window[-1]["order"] for window in windows] == list(range(101, 301))
    assert totals == [min(256, order) for order in range(101, 301)]


def test_removing_a_follow_up_shows_it_removed(store: StoreWithLog) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source="viewer")

    [item] = ops(latest_target(store, "inspector", "follow-ups"))["/followUpQueue"]["items"]

    assert (item["followUpId"], item["state"]) == (follow_up_id, "removed")


def test_cancelling_follow_ups_on_a_failed_end_shows_them_cancelled(store: StoreWithLog) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    store.finish_run(RUN, status="failed", error="boom")

    inspector = latest_target(store, "inspector", "follow-ups")

    [item] = ops(inspector)["/followUpQueue"]["items"]
    assert (item["followUpId"], item["state"]) == (follow_up_id, "cancelled")
    assert (
        inspector.presentation_revision
        == viewer_deltas(project(store), RUN, after_revision=1).current_revision
    )


def test_removing_a_follow_up_older_than_the_window_resends_the_same_window(
    store: StoreWithLog,
) -> None:
    running_run(store)
    oldest = queued_id(store, "follow-1")
    for number in range(2, 258):
        queue(store, f"follow-{number}")
    before = ops(latest_target(store, "inspector", "follow-ups"))

    store.remove_follow_up(RUN, oldest, actor=HUMAN, source="viewer")

    after = latest_target(store, "inspector", "follow-ups")
    assert after.presentation_revision == before["/presentationRevision"] + 1
    assert {**ops(after), "/presentationRevision": None} == {
        **before,
        "/presentationRevision": None,
    }


# -- session targets (§7.4) -------------------------------------------------------------------


def binding(session_id: str = SESSION) -> dict[str, Any]:
    return session_binding(RUN, session_id)


def recording_run(store: StoreWithLog) -> None:
    create(store)
    store.record_session_binding(RUN, binding())


def body(delta: ViewerDelta) -> list[dict[str, Any]]:
    """The patch without its revision prefix."""
    return [
        op for op in delta.patch if op["path"] not in ("/presentationRevision", "/graphRevision")
    ]


def test_the_first_binding_adds_the_graphs_empty_session(store: StoreWithLog) -> None:
    recording_run(store)

    [graph] = latest(store)

    empty = {"items": [], "start": 0, "total": 0}
    assert (graph.target_type, graph.target_key) == ("graph", "")
    assert ops(graph)["/graphRevision"] == graph.presentation_revision
    assert body(graph) == [
        {
            "op": "add",
            "path": "/session",
            "value": {
                "binding": binding(),
                "presentationRevision": 0,
                "entryPage": empty,
                "eventPage": empty,
                "eventsMalformed": False,
                "eventsTornTail": False,
                "capture": None,
                "replayCheckpoint": None,
            },
        }
    ]


def test_a_later_segments_binding_replaces_only_the_sessions_binding(
    store: StoreWithLog,
) -> None:
    recording_run(store)
    store.record_session_binding(RUN, binding("session-2"), attempt_id="attempt-2")

    [graph] = latest(store)

    assert body(graph) == [{"op": "add", "path": "/session/binding", "value": binding("session-2")}]


def test_an_entry_appends_to_the_conversation_and_counts_in_the_capture(
    store: StoreWithLog,
) -> None:
    recording_run(store)
    store.update_session_capture(RUN, session_capture("recording", 0, 0))
    store.append_session_entry(RUN, {"id": "e-1", "role": "user"})

    [entries, capture] = latest(store)

    assert (entries.target_type, entries.target_key) == ("conversation", "entries:tail")
    item = {"segmentId": segment_id_for(RUN, None), "entrySeq": 1, "entryId": "e-1"}
    assert body(entries) == [
        append("/items", [{**item, "entry": {"id": "e-1", "role": "user"}}]),
        replace("/total", 1),
    ]
    assert (capture.target_type, capture.target_key) == ("conversation", "capture")
    assert body(capture) == [replace("/capture/entryCount", 1)]


def test_counts_before_any_capture_only_bump_the_conversations_revision(
    store: StoreWithLog,
) -> None:
    recording_run(store)
    store.append_session_entry(RUN, {"role": "user"})

    [_, capture] = latest(store)

    assert capture.patch == [replace("/presentationRevision", capture.presentation_revision)]


def test_an_event_batch_appends_to_the_session_timeline_and_counts_in_the_capture(
    store: StoreWithLog,
) -> None:
    recording_run(store)
    store.update_session_capture(RUN, session_capture("recording", 0, 0))
    store.append_session_events(RUN, session_events(1, 3))

    [timeline, capture] = latest(store)

    assert (timeline.target_type, timeline.target_key) == ("timeline", "session:tail")
    assert body(timeline) == [append("/items", session_events(1, 3)), replace("/total", 3)]
    assert body(capture) == [
        replace("/capture/eventCount", 3),
        {"op": "add", "path": "/capture/lastEventSeq", "value": 3},
    ]


def test_a_batch_reaching_a_new_page_reloads_the_session_timeline(store: StoreWithLog) -> None:
    recording_run(store)
    store.append_session_events(RUN, session_events(1, 250))
    store.append_session_events(RUN, session_events(251, 10))

    [timeline, _] = latest(store)

    assert (timeline.target_type, timeline.target_key) == ("timeline", "session:reload")
    assert body(timeline) == [replace("/total", 260)]


def test_a_capture_update_adds_the_conversations_capture(store: StoreWithLog) -> None:
    recording_run(store)
    before = viewer_deltas(project(store), RUN, after_revision=1).current_revision
    store.update_session_capture(RUN, session_capture("complete", 0, 0))

    result = deltas_after(project(store), before)

    [capture] = result.deltas
    assert result.current_revision == before + 1
    assert (capture.target_type, capture.target_key) == ("conversation", "capture")
    assert body(capture) == [
        {"op": "add", "path": "/capture", "value": session_capture("complete", 0, 0)}
    ]


@pytest.mark.parametrize(
    ("old_total", "new_total", "crosses"),
    [(0, 1, False), (0, 256, False), (0, 257, True), (255, 256, False), (256, 257, True)],
)
def test_a_batch_crosses_a_page_when_its_last_item_is_on_a_new_page(
    old_total: int, new_total: int, crosses: bool
) -> None:
    assert crosses_page(old_total, new_total) is crosses


# -- rebuilds ---------------------------------------------------------------------------------


def test_replaying_the_log_in_two_halves_equals_one_pass(store: StoreWithLog) -> None:
    running_run(store)
    follow_up_id = queued_id(store, "follow-1")
    queue(store, "follow-2")
    store.pause_run(RUN)
    store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source="viewer")
    store.finish_run(RUN, status="failed", error="boom")

    assert replayed_in_halves(store).tables == project(store).tables


def test_replaying_a_recorded_session_in_two_halves_equals_one_pass(store: StoreWithLog) -> None:
    recording_run(store)
    store.update_session_capture(RUN, session_capture("recording", 0, 0))
    store.append_session_entry(RUN, {"role": "user"})
    store.append_session_events(RUN, session_events(1, 3))
    store.record_session_binding(RUN, binding("session-2"), attempt_id="attempt-2")
    store.append_session_entry(RUN, {"role": "assistant"}, attempt_id="attempt-2")

    assert replayed_in_halves(store).tables == project(store).tables


def replayed_in_halves(store: StoreWithLog) -> FakeView:
    """The view after applying the first half of the log, copying it, then the rest."""
    projection = ViewerDeltasProjection()
    events = [
        event
        for event in map(projected, store.storage.select_log(after=0, limit=10_000))
        if event.wire_name in projection.topics
    ]
    half = len(events) // 2

    first = FakeView()
    for event in events[:half]:
        projection.apply(event, first)
    resumed = FakeView()
    resumed.tables = copy.deepcopy(first.tables)
    for event in events[half:]:
        projection.apply(event, resumed)
    return resumed


# -- pure helpers (I3, I5) --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("old_total", "items", "expected"),
    [
        pytest.param(0, ["a"], [append("/items", ["a"]), replace("/total", 1)], id="first"),
        pytest.param(
            256,
            ["x"],
            [REMOVE_FIRST, append("/items", ["x"]), replace("/start", 1), replace("/total", 257)],
            id="past-a-page",
        ),
        pytest.param(
            10,
            list(range(300)),
            [
                replace("/items", list(range(44, 300))),
                replace("/start", 54),
                replace("/total", 310),
            ],
            id="more-than-a-page",
        ),
    ],
)
def test_tail_patches_match_upstream(old_total: int, items: list[Any], expected: Any) -> None:
    assert viewer_tail_patch(old_total, items) == expected


def test_a_tail_patch_of_nothing_has_no_ops() -> None:
    assert viewer_tail_patch(5, []) == []


@pytest.mark.parametrize("old_total", [-1, 1.5, True, None])
def test_a_tail_patch_needs_a_non_negative_integer_total(old_total: Any) -> None:
    with pytest.raises(
        ViewerPageTotalError, match=r"^Viewer page total must be a non-negative integer$"
    ):
        viewer_tail_patch(old_total, ["a"])


@pytest.mark.parametrize(
    ("total", "cursor", "start"),
    [(300, None, 44), (300, 0, 0), (300, 150, 22), (300, 299, 44), (256, None, 0)],
)
def test_page_starts_match_upstream(total: int, cursor: int | None, start: int) -> None:
    assert workflow_page_start(total, cursor) == start


def test_a_page_cursor_must_be_a_non_negative_integer() -> None:
    with pytest.raises(InvalidViewerCursorError):
        workflow_page_start(300, -1)
