"""Rebuilding on several processes gives exactly the views built incrementally."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore

SESSION = Actor("session", "session-1")


def dump(runtime: StoreRuntime) -> dict[str, list[dict[str, Any]]]:
    runtime.catch_up()
    reader = runtime.views.reader()
    tables: dict[str, list[dict[str, Any]]] = {}
    for runner in runtime.projector.runners.values():
        for table in runner.projection.tables:
            rows = reader.scan(table)
            tables[table.name] = sorted(rows, key=lambda row: repr(table.key_of(row)))
    return tables


def play(store: WorkflowStore) -> None:
    for run in range(4):
        run_id = f"run-{run}"
        store.create_run(run_id, workflow_name="review", input={"run": run})
        store.bind_origin_session(run_id, "session-1")
        for index in range(12):
            store.queue_follow_up(
                run_id,
                request_id=f"request-{index}",
                target_session_id="session-1",
                actor=SESSION,
                source="workflow-tool",
                prompt=f"prompt {index}",
            )
        scope = store.ensure_settings_scope(
            run_id,
            settings={"run": run},
            policy={"rules": [{"path": "/run", "permissions": {"human": ["replace"]}}]},
        )
        store.change_settings(
            run_id,
            scope.scope_id,
            request_id="settings-1",
            actor=Actor("human"),
            source="cli",
            patch=[{"op": "replace", "path": "/run", "value": -run}],
        )
        if run % 2:
            store.finish_run(run_id, status="failed", error="boom")
        else:
            store.finish_run(run_id, status="completed", final_output={"ok": run})


def test_a_two_process_rebuild_gives_the_incremental_views(
    store: WorkflowStore, runtime: StoreRuntime, store_url: str
) -> None:
    if store_url == "memory://":
        pytest.skip("a memory store cannot be shared with other processes")
    play(store)
    before = dump(runtime)
    assert all(before.values()), "every table should hold rows before the rebuild"
    read = runtime.rebuild_projections(processes=2)
    assert read == runtime.storage.max_position()
    assert dump(runtime) == before
    assert {status.lag for status in store.projection_status()} == {0}
