"""Commands saving overlapping aggregates in opposite orders never deadlock on PostgreSQL.

Writers take no table lock, so two batch inserts that write the same aggregates' next
versions in opposite orders could each wait for a row the other has written. Every insert
takes its aggregates' advisory locks in one sorted order first, so they queue instead:
PostgreSQL's deadlock counter for the database must stay where it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import psycopg
import pytest

from runledger.domain.application import HOST, UnitOfWork, WorkflowRuns
from runledger.domain.runs import run_aggregate_id
from runledger.infrastructure.storage.postgres import PostgresStorage

pytestmark = pytest.mark.postgres

RUNS = [f"run-{number:02d}" for number in range(20)]
ROUNDS = 30


@pytest.fixture
def storage(postgres_store_url: str) -> Iterator[PostgresStorage]:
    opened = PostgresStorage(postgres_store_url)
    try:
        yield opened
    finally:
        opened.close()


def deadlocks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    count: int = row[0]
    return count


def toggle_all(run_ids: list[str]) -> Callable[[UnitOfWork], None]:
    """One command pausing (or resuming) every run, saved in the order given."""

    def command(unit: UnitOfWork) -> None:
        for run_id in run_ids:
            run = unit.run(run_id)
            if run.paused:
                run.resume(actor=HOST, now=unit.now)
            else:
                run.pause(status_detail=None, actor=HOST, now=unit.now)

    return command


def test_two_commands_changing_the_same_runs_in_opposite_orders_never_deadlock(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    setup = WorkflowRuns(storage)
    for run_id in RUNS:
        setup.create_run(run_id, workflow_name="order", input={})
    before = deadlocks(postgres_store_url)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def race(run_ids: list[str]) -> None:
        app = WorkflowRuns(storage)
        try:
            for _ in range(ROUNDS):
                barrier.wait(timeout=30)
                app.execute(toggle_all(run_ids))
        except BaseException as error:
            errors.append(error)
            barrier.abort()

    threads = [
        threading.Thread(target=race, args=(RUNS,)),
        threading.Thread(target=race, args=(RUNS[::-1],)),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)

    assert not errors, errors
    storage.close()
    assert deadlocks(postgres_store_url) == before, "PostgreSQL detected a deadlock"
    reread = WorkflowRuns(PostgresStorage(postgres_store_url))
    versions = {
        run_id: len(reread.storage.events.select_events(run_aggregate_id(run_id)))
        for run_id in RUNS
    }
    assert versions == dict.fromkeys(RUNS, 1 + 2 * ROUNDS), "a change was lost or doubled"
    reread.storage.close()
