"""A command that reads an aggregate other writers keep changing stops at that read and runs
again holding it, instead of running to its end first (its save would be thrown away as hot),
on every backend."""

from __future__ import annotations

from typing import Any
from uuid import UUID

import pytest

from runledger.domain.ports import CommandUnit
from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.values import HOST, Actor
from runledger.infrastructure.commits.executor import CommandExecutor
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import create


def executor(runtime: StoreRuntime) -> CommandExecutor:
    commits = runtime.app.commits
    assert isinstance(commits, CommandExecutor)
    return commits


def made_hot(runtime: StoreRuntime, store: WorkflowStore, second_store: WorkflowStore) -> UUID:
    """run-1, which another writer moved past ``store``'s cached copy so that ``store``'s
    next save of it conflicted: hot in ``runtime``."""
    second_store.record_progress("run-1", status="running", status_detail="elsewhere")
    store.record_progress("run-1", status="running", status_detail="conflicted")
    run_id = run_aggregate_id("run-1")
    assert executor(runtime).hot(run_id)
    return run_id


def spied(
    runtime: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> tuple[list[int], list[list[UUID]]]:
    """The calls of ``Run.record_progress`` (one per attempt that ran to its end) and the
    aggregates each attempt held."""
    progressed: list[int] = []
    locks: list[list[UUID]] = []
    record_progress = Run.record_progress
    lock = runtime.storage.lock_aggregates

    def counted(run: Run, *args: Any, **kwargs: Any) -> Any:
        progressed.append(run.version)
        return record_progress(run, *args, **kwargs)

    def recorded(aggregate_ids: Any, **kwargs: Any) -> Any:
        locks.append(list(aggregate_ids))
        return lock(aggregate_ids, **kwargs)

    monkeypatch.setattr(Run, "record_progress", counted)
    monkeypatch.setattr(runtime.storage, "lock_aggregates", recorded)
    return progressed, locks


def test_a_read_of_a_hot_run_stops_the_attempt_and_it_runs_again_holding_it(
    runtime: StoreRuntime,
    store: WorkflowStore,
    second_store: WorkflowStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    create(store, "run-1")
    run_id = made_hot(runtime, store, second_store)
    progressed, locks = spied(runtime, monkeypatch)

    store.record_progress("run-1", status="running", status_detail="held")

    assert locks == [[], [run_id]], "stopped unheld, then ran holding the run"
    assert len(progressed) == 1, "the domain command ran once, holding the run"
    run = store.get_run("run-1")
    assert run is not None
    assert run.status_detail == "held"


def test_a_read_of_a_quiet_run_runs_on_without_holding_it(
    runtime: StoreRuntime, store: WorkflowStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store, "run-1")
    assert not executor(runtime).hot(run_aggregate_id("run-1"))
    progressed, locks = spied(runtime, monkeypatch)

    store.record_progress("run-1", status="running", status_detail="optimistic")

    assert (locks, len(progressed)) == ([[]], 1)


def test_a_save_holding_some_runs_holds_every_existing_run_it_changes(
    runtime: StoreRuntime,
    store: WorkflowStore,
    second_store: WorkflowStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Its insert would otherwise lock run-2 after run-1, out of the one order: two commands
    # holding one run each and writing both deadlocked (test_postgres_gaps, opposite orders).
    create(store, "run-1")
    create(store, "run-2")
    hot, quiet = made_hot(runtime, store, second_store), run_aggregate_id("run-2")
    assert not executor(runtime).hot(quiet)
    _, locks = spied(runtime, monkeypatch)

    def pause_both(unit: CommandUnit) -> None:
        for run_id in ("run-1", "run-2"):
            unit.run(run_id).pause(status_detail=None, actor=HOST, now=unit.now)

    runtime.app.execute(pause_both)

    assert locks == [[], [hot], sorted([hot, quiet])]
    assert all(run is not None and run.paused for run in map(store.get_run, ("run-1", "run-2")))


def test_a_save_holding_a_run_creates_new_aggregates_without_holding_them(
    runtime: StoreRuntime,
    store: WorkflowStore,
    second_store: WorkflowStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    create(store, "run-1")
    store.bind_origin_session("run-1", "session-1")
    run_id = made_hot(runtime, store, second_store)
    _, locks = spied(runtime, monkeypatch)

    store.queue_follow_up(
        "run-1",
        request_id="request-1",
        target_session_id="session-1",
        actor=Actor("session", "session-1"),
        source="pi-session",
        prompt="Check the edge cases.",
    )

    # The follow-up and its message are new: no other writer holds them, so no third attempt.
    assert locks == [[], [run_id]]
