"""``StoreRuntime.add_views_listener``: what tells the serve broadcaster that views moved."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store


@pytest.fixture
def runtime(serve_url: str) -> Iterator[StoreRuntime]:
    with open_runtime(serve_url) as opened:
        yield opened


def test_a_listener_is_told_after_each_command_of_this_process(runtime: StoreRuntime) -> None:
    told: list[int] = []
    runtime.add_views_listener(lambda: told.append(1))
    store = WorkflowStore(runtime)

    store.create_run("run-1", workflow_name="echo", input={})
    after_create = len(told)
    store.pause_run("run-1")

    assert after_create >= 1
    assert len(told) > after_create


def test_a_removed_listener_is_not_told(runtime: StoreRuntime) -> None:
    told: list[int] = []
    remove = runtime.add_views_listener(lambda: told.append(1))
    remove()

    WorkflowStore(runtime).create_run("run-1", workflow_name="echo", input={})

    assert told == []


def test_a_failing_listener_does_not_fail_the_command(runtime: StoreRuntime) -> None:
    def broken() -> None:
        raise RuntimeError("listener bug")

    runtime.add_views_listener(broken)
    store = WorkflowStore(runtime)

    created = store.create_run("run-1", workflow_name="echo", input={})

    assert created.run_id == "run-1"
    assert store.get_run("run-1") is not None


def test_a_listener_is_told_of_another_stores_commit(durable_serve_url: str) -> None:
    told = threading.Event()
    with open_runtime(durable_serve_url) as runtime:
        runtime.add_views_listener(told.set)
        told.clear()
        with open_store(durable_serve_url) as other:
            other.create_run("run-1", workflow_name="echo", input={})

        # The follower looks about once a second; give it a few.
        assert told.wait(5), "the follower never told the listener"
        assert WorkflowStore(runtime).get_run("run-1") is not None
