"""Commands trust the aggregates this process has seen; the store's unique keys catch a
wrong guess (DESIGN "Write path": no reads on the happy path).

A second runtime on the same store plays another host process: its writes make the first
one's cache stale, and every answer must still be what the store holds.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from runledger.domain.errors import WorkflowError
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore

SOURCE = "workflow-tool"
ACTOR = Actor("session", "session-1")


def queue(store: WorkflowStore, request_id: str, run_id: str = "run-1") -> Any:
    return store.queue_follow_up(
        run_id,
        request_id=request_id,
        target_session_id="session-1",
        actor=ACTOR,
        source=SOURCE,
        prompt=f"prompt of {request_id}",
    )


def started(store: WorkflowStore, run_id: str = "run-1") -> None:
    store.create_run(run_id, workflow_name="echo", input={})
    store.bind_origin_session(run_id, "session-1")


@contextmanager
def counting_reads(runtime: StoreRuntime) -> Iterator[list[str]]:
    """Note every aggregate read and index lookup the application makes on its storage."""
    reads: list[str] = []
    events = runtime.storage.events
    storage = runtime.storage

    def counted(name: str, method: Callable[..., Any]) -> Callable[..., Any]:
        def call(*args: Any, **kwargs: Any) -> Any:
            reads.append(name)
            return method(*args, **kwargs)

        return call

    originals = (events.select_events, storage.originator_ids_by_key)
    events.select_events = counted("select_events", events.select_events)  # type: ignore[method-assign]
    storage.originator_ids_by_key = counted(  # type: ignore[method-assign]
        "originator_ids_by_key", storage.originator_ids_by_key
    )
    try:
        yield reads
    finally:
        events.select_events, storage.originator_ids_by_key = originals  # type: ignore[method-assign]


def test_queueing_on_a_run_this_process_has_seen_reads_no_aggregate(
    runtime: StoreRuntime, store: WorkflowStore
) -> None:
    started(store)
    queue(store, "request-0")

    with counting_reads(runtime) as reads:
        for number in range(1, 6):
            queue(store, f"request-{number}")

    assert reads == []
    queued = store.follow_up_queue("run-1")
    assert queued is not None
    assert [f.request_id for f in queued.follow_ups] == [f"request-{n}" for n in range(6)]


def test_a_retried_request_is_adopted_exactly_though_the_command_assumed_it_new(
    store: WorkflowStore,
) -> None:
    started(store)
    first = queue(store, "request-1")
    queue(store, "request-2")

    again = queue(store, "request-1")

    assert again.adopted
    assert again.follow_up == first.follow_up
    queued = store.follow_up_queue("run-1")
    assert queued is not None
    assert [f.order for f in queued.follow_ups] == [1, 2]


@pytest.fixture
def other_host(durable_url: str) -> Iterator[WorkflowStore]:
    """Another host process on the same store (its own runtime and aggregate cache)."""
    with open_runtime(durable_url) as runtime:
        yield WorkflowStore(runtime)


@pytest.fixture
def host(durable_url: str) -> Iterator[WorkflowStore]:
    with open_runtime(durable_url) as runtime:
        yield WorkflowStore(runtime)


def test_a_run_another_process_ended_refuses_a_follow_up_from_a_stale_cache(
    host: WorkflowStore, other_host: WorkflowStore
) -> None:
    started(host)
    queue(host, "request-1")
    other_host.finish_run("run-1", status="completed")

    with pytest.raises(WorkflowError, match="does not accept changes with status completed"):
        queue(host, "request-2")


def test_a_follow_up_another_process_queued_meanwhile_takes_the_next_order(
    host: WorkflowStore, other_host: WorkflowStore
) -> None:
    started(host)
    queue(host, "request-1")
    queue(other_host, "request-2")

    third = queue(host, "request-3")

    assert third.follow_up.order == 3
    assert [f.order for f in host.follow_up_queue("run-1").follow_ups] == [1, 2, 3]  # type: ignore[union-attr]


def test_a_retry_adopts_the_follow_up_as_another_process_left_it(
    host: WorkflowStore, other_host: WorkflowStore
) -> None:
    started(host)
    queued = queue(host, "request-1")
    other_host.remove_follow_up("run-1", queued.follow_up.follow_up_id, actor=ACTOR, source=SOURCE)

    again = queue(host, "request-1")

    assert again.adopted
    assert again.follow_up.state == "removed"
