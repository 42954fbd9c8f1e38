"""A bad end reaches continuation ancestors that still take follow-ups (DESIGN decision 1)."""

from __future__ import annotations

from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore

SESSION = Actor("session", "session-1")


def _queue(store: WorkflowStore, run_id: str, request_id: str) -> str:
    queued = store.queue_follow_up(
        run_id,
        request_id=request_id,
        target_session_id="session-1",
        actor=SESSION,
        source="workflow-tool",
        prompt=f"{request_id} prompt",
    )
    return queued.follow_up.follow_up_id


def _waiting_parent_with_child(store: WorkflowStore) -> None:
    store.create_run("parent", workflow_name="echo", input={}, status="waiting")
    store.bind_origin_session("parent", "session-1")
    store.create_run("child", workflow_name="echo", input={}, parent_run_id="parent")
    store.bind_origin_session("child", "session-1")


def test_a_failing_child_records_its_end_on_a_waiting_continuation_parent(
    store: WorkflowStore,
) -> None:
    _waiting_parent_with_child(store)
    store.finish_run("child", status="failed", error="boom")
    events = [event for event in store.event_log(run_id="parent")]
    ended = [event for event in events if event.wire_name == "run.continuation-ended"]
    assert [(e.payload["continuation_run_id"], e.payload["status"]) for e in ended] == [
        ("child", "failed")
    ]
    assert ended[0].actor.type == "system"


def test_a_waiting_parents_follow_up_is_cancelled_with_the_childs_error(
    store: WorkflowStore,
) -> None:
    _waiting_parent_with_child(store)
    follow_up_id = _queue(store, "parent", "on-parent")
    store.finish_run("child", status="failed", error="boom")
    record = store.get_follow_up(follow_up_id)
    assert record is not None
    assert (record.state, record.reason) == ("cancelled", "boom")


def test_a_completing_child_leaves_its_parent_untouched(store: WorkflowStore) -> None:
    _waiting_parent_with_child(store)
    before = len(store.event_log(run_id="parent"))
    store.finish_run("child", status="completed", final_output={"ok": True})
    assert len(store.event_log(run_id="parent")) == before


def test_an_ended_parent_gets_no_event_from_its_childs_failure(store: WorkflowStore) -> None:
    store.create_run("parent", workflow_name="echo", input={})
    store.bind_origin_session("parent", "session-1")
    store.create_run("child", workflow_name="echo", input={}, parent_run_id="parent")
    store.finish_run("parent", status="completed")
    store.finish_run("child", status="failed", error="boom")
    names = [event.wire_name for event in store.event_log(run_id="parent")]
    assert "run.continuation-ended" not in names
