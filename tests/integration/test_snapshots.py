"""Loading a run from its snapshot gives exactly the state a full replay gives."""

from __future__ import annotations

from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore

SESSION = Actor("session", "session-1")


def _queue_many(store: WorkflowStore, count: int) -> None:
    store.create_run("run-1", workflow_name="echo", input={"task": "reply"})
    store.bind_origin_session("run-1", "session-1")
    for index in range(count):
        store.queue_follow_up(
            "run-1",
            request_id=f"request-{index}",
            target_session_id="session-1",
            actor=SESSION,
            source="workflow-tool",
            prompt=f"prompt {index}",
        )


def test_a_run_with_many_events_is_snapshotted(store: WorkflowStore, runtime: StoreRuntime) -> None:
    _queue_many(store, 120)
    assert runtime.app.snapshots is not None
    snapshots = list(runtime.app.snapshots.get(run_aggregate_id("run-1")))
    assert [snapshot.originator_version for snapshot in snapshots] == [100]


def test_a_run_loaded_from_its_snapshot_equals_a_full_replay(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    _queue_many(store, 120)
    store.pause_run("run-1", status_detail="paused")
    # An explicit version bypasses the cache: the latest snapshot (100) plus events 101-123.
    from_snapshot: object = runtime.app.repository.get(run_aggregate_id("run-1"), version=123)
    replayed = None
    for event in runtime.app.events.get(run_aggregate_id("run-1")):
        replayed = event.mutate(replayed)  # type: ignore[attr-defined]
    assert isinstance(from_snapshot, Run)
    assert isinstance(replayed, Run)
    assert from_snapshot.version == replayed.version == 123
    assert vars(from_snapshot) == vars(replayed)


def test_a_new_store_on_the_same_database_continues_from_the_snapshot(
    store: WorkflowStore, store_url: str
) -> None:
    if store_url == "memory://":
        return  # a memory store is not shared between stores
    from runledger.infrastructure.store import open_store

    _queue_many(store, 105)
    with open_store(store_url) as second:
        queued = second.queue_follow_up(
            "run-1",
            request_id="from-second",
            target_session_id="session-1",
            actor=SESSION,
            source="workflow-tool",
            prompt="after the snapshot",
        )
        assert queued.follow_up.order == 106
