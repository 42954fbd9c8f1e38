"""A command that lost several conflicts holds its aggregates going first: other writers'
saves of them wait for it, on every backend (``EventStorage.lock_aggregates(first=True)``).

PostgreSQL's inserts take their aggregates' locks and memory's wait for the holder anyway;
on SQLite a first attempt holds nothing, so its save gives way (``AggregateLocks.give_way``)
instead of committing between the holder's reads and its insert: before, four processes
queueing on one run saw a command lose all 50 attempts."""

from __future__ import annotations

import multiprocessing
import threading
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError

from runledger.domain.runs import run_aggregate_id
from runledger.infrastructure.commits.executor import FIRST_AFTER
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.integration.test_file_locks import hold_in_another_process
from tests.support.scenario import create

WAIT_SECONDS = 10
STILL_WAITING_SECONDS = 0.5


def progressed_in_background(store: WorkflowStore, run_id: str) -> threading.Event:
    """Start ``record_progress`` on another thread; the event is set once it returned."""
    done = threading.Event()

    def progress() -> None:
        store.record_progress(run_id, status="running", status_detail="after the holder")
        done.set()

    threading.Thread(target=progress, daemon=True).start()
    return done


def assert_saved_only_after_the_hold(
    holder: Any, held: Any, release: Any, writer: WorkflowStore, reader: WorkflowStore
) -> None:
    """Start ``holder`` (a thread or a process that sets ``held`` once it holds run-1 going
    first and lets go on ``release``): ``writer``'s ``record_progress`` on run-1 writes
    nothing while it holds, then lands."""
    holder.start()
    try:
        assert held.wait(WAIT_SECONDS)
        before = len(reader.event_log(run_id="run-1"))
        done = progressed_in_background(writer, "run-1")
        assert not done.wait(STILL_WAITING_SECONDS), "saved while the run was held going first"
        assert len(reader.event_log(run_id="run-1")) == before
    finally:
        release.set()
        holder.join(WAIT_SECONDS)
    assert done.wait(WAIT_SECONDS)
    assert len(reader.event_log(run_id="run-1")) == before + 1


def test_a_save_waits_for_a_writer_holding_its_run_going_first(
    runtime: StoreRuntime, store: WorkflowStore, second_store: WorkflowStore
) -> None:
    create(store, "run-1")
    second_store.get_run("run-1")
    held, release = threading.Event(), threading.Event()

    def hold() -> None:
        with runtime.storage.lock_aggregates([run_aggregate_id("run-1")], first=True):
            held.set()
            release.wait(WAIT_SECONDS)

    holder = threading.Thread(target=hold, daemon=True)
    assert_saved_only_after_the_hold(holder, held, release, second_store, store)


def test_a_sqlite_save_waits_for_another_process_holding_its_run_going_first(
    tmp_path: Path,
) -> None:
    path = tmp_path / "runledger.db"
    context = multiprocessing.get_context("spawn")
    held, release = context.Event(), context.Event()
    with open_store(f"sqlite:///{path}") as store:
        create(store, "run-1")
        holder = context.Process(
            target=hold_in_another_process,
            args=(f"{path}-locks", str(run_aggregate_id("run-1")), held, release, True),
        )
        conflicts = store._runtime.stats.conflicts
        assert_saved_only_after_the_hold(holder, held, release, store, store)
        # It gave way once, then waited for its turn holding the run.
        assert store._runtime.stats.conflicts == conflicts + 1


def test_a_command_goes_first_once_it_lost_first_after_conflicts(
    runtime: StoreRuntime, store: WorkflowStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    create(store, "run-1")
    before = len(store.event_log(run_id="run-1"))
    recorder = runtime.storage.events
    insert = recorder.insert_events
    losses = FIRST_AFTER + 2

    def losing_insert(*args: Any, **kwargs: Any) -> Any:
        nonlocal losses
        if losses:
            losses -= 1
            raise IntegrityError("a version taken meanwhile (this test's)")
        return insert(*args, **kwargs)

    lock = runtime.storage.lock_aggregates
    firsts: list[bool] = []

    def recording_lock(aggregate_ids: Any, **kwargs: Any) -> Any:
        firsts.append(kwargs.get("first", False))
        return lock(aggregate_ids, **kwargs)

    monkeypatch.setattr(recorder, "insert_events", losing_insert)
    monkeypatch.setattr(runtime.storage, "lock_aggregates", recording_lock)
    store.record_progress("run-1", status="running")
    # Attempts 1 to FIRST_AFTER lost 0 to FIRST_AFTER - 1 conflicts before them.
    assert firsts == [False] * FIRST_AFTER + [True] * 3
    assert len(store.event_log(run_id="run-1")) == before + 1
