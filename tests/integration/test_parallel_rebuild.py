"""Rebuilding on several processes gives exactly the views built incrementally."""

from __future__ import annotations

import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from runledger.domain.values import Actor
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.integration.test_blue_green import environment

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


# -- a killed rebuild ---------------------------------------------------------------------------

KILLED_EVENTS = 30_000
WAIT_SECONDS = 60.0
GONE_SECONDS = 10.0
"""A bound on how long an orphaned group may take to die (the kernel kills it at once)."""


def children_of(pid: int) -> list[int]:
    """The processes whose parent is ``pid`` (read from /proc: Linux)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_bytes()
            except OSError:
                continue
            if int(stat.rpartition(b")")[2].split()[1]) == pid:
                found.append(int(entry.name))
    return found


def ended(pid: int) -> bool:
    """Whether the process is gone, or a zombie (ended; nothing here reaps orphans)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return True
    return stat.rpartition(b")")[2].split()[0] == b"Z"


def wait_until(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting until {what}")
        time.sleep(0.01)


def slots(url: str) -> dict[str, tuple[int | None, int | None]]:
    """Each projection's active and building slot."""
    with open_runtime(url, embedded_projections=False) as runtime:
        registries = [runtime.views.registry(name) for name in runtime.projection_names()]
    return {
        registry.name: (
            registry.active.slot if registry.active else None,
            registry.building.slot if registry.building else None,
        )
        for registry in registries
    }


def building(url: str, groups: list[int]) -> bool:
    """Whether one of ``groups`` holds a build lock and its build has committed a page."""
    with open_runtime(url, embedded_projections=False) as runtime:
        registries = [runtime.views.registry(name) for name in runtime.projection_names()]
    return any(
        registry.building is not None
        and registry.building.position > 0
        and registry.lock_owner is not None
        and int(registry.lock_owner.split(":")[1]) in groups
        for registry in registries
    )


@pytest.fixture
def long_history(durable_url: str) -> str:
    """A store whose rebuild takes long enough to be killed half-way; its URL."""
    with open_runtime(durable_url) as runtime:
        for batch in HistoryGenerator(seed=11, prefix="kill").batches(KILLED_EVENTS):
            runtime.storage.events.insert_events(batch)
        runtime.catch_up()
    return durable_url


def kill_rebuild_half_way(url: str) -> list[int]:
    """Start ``projections rebuild --all --processes 2`` and SIGKILL it (it alone) once a
    group committed a page; returns the pids of its group processes."""
    with tempfile.TemporaryFile() as output:
        parent = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "runledger.infrastructure.cli",
                "projections",
                "rebuild",
                "--all",
                "--processes",
                "2",
            ],
            env={**environment(), "RUNLEDGER_URL": url},
            stdout=output,
            stderr=subprocess.STDOUT,
        )

        def running(condition: Callable[[], bool]) -> Callable[[], bool]:
            def check() -> bool:
                if parent.poll() is not None:
                    output.seek(0)
                    pytest.fail(f"the rebuild ended by itself:\n{output.read().decode()}")
                return condition()

            return check

        try:
            wait_until(running(lambda: len(children_of(parent.pid)) >= 2), "groups started")
            groups = children_of(parent.pid)
            wait_until(running(lambda: building(url, groups)), "a group committed a page")
        finally:
            parent.send_signal(signal.SIGKILL)
            parent.wait(timeout=30)
    return groups


def assert_killed_with_nothing_switched(url: str) -> None:
    before = slots(url)

    groups = kill_rebuild_half_way(url)

    deadline = time.monotonic() + GONE_SECONDS
    while not all(ended(pid) for pid in groups) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert [pid for pid in groups if not ended(pid)] == [], "a group outlived its parent"
    after = slots(url)
    assert {name: active for name, (active, _) in after.items()} == {
        name: active for name, (active, _) in before.items()
    }, "a group switched after its parent was killed"
    assert any(building is not None for _, building in after.values())


@pytest.mark.slow
def test_killing_a_rebuild_kills_its_group_processes_and_nothing_switches(
    long_history: str,
) -> None:
    assert_killed_with_nothing_switched(long_history)


@pytest.mark.slow
def test_killed_rebuilds_never_switch_however_often_they_are_killed(long_history: str) -> None:
    for _ in range(3):
        assert_killed_with_nothing_switched(long_history)


@pytest.mark.slow
def test_the_rebuild_after_a_killed_one_resumes_it_and_switches(long_history: str) -> None:
    kill_rebuild_half_way(long_history)
    killed = {name: building for name, (_, building) in slots(long_history).items() if building}

    with open_runtime(long_history, embedded_projections=False) as runtime:
        outcomes = runtime.rebuild_blue_green(processes=2)

    assert all(outcome.switched and outcome.equal for outcome in outcomes), outcomes
    resumed = {outcome.name: outcome.slot for outcome in outcomes if outcome.name in killed}
    assert resumed == killed, "the killed builds' slots are resumed, not begun again"
