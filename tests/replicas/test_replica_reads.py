"""Reads from a real streaming replica, with read-your-writes: a query after a command reads
the write on the replica; a token carries a write to another process; a replica that lags or
is stopped is waited for (a bounded time) and then the primary answers, never stale data; the
read models on the replica are the primary's."""

from __future__ import annotations

import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import cast

import pytest

from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.storage.postgres import PostgresStorage
from runledger.infrastructure.storage.replicas import ReadPosition, ReplicaStats
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.integration.test_same_commit_views import queue_as_session
from tests.replicas.conftest import ReplicatedDatabase
from tests.support.clusters import PASSWORD
from tests.support.scenario import RUN, running_run

ROOT = Path(__file__).resolve().parents[2]
WRITER = """
import sys
from runledger.infrastructure.store import open_store
from tests.support.scenario import running_run
with open_store(sys.argv[1]) as store:
    running_run(store, session_id="session-1")
    print(store.position_token())
"""
"""Another process: it writes a run, prints its token and ends."""


def stats(runtime: StoreRuntime) -> ReplicaStats:
    replicas = cast(PostgresStorage, runtime.storage).replicas
    assert replicas is not None
    return replicas.stats


@contextmanager
def replicated_store(database: ReplicatedDatabase, wait: float) -> Iterator[WorkflowStore]:
    with open_runtime(database.url(replica_wait=wait)) as runtime:
        yield WorkflowStore(runtime)


def runtime_of(store: WorkflowStore) -> StoreRuntime:
    return store._runtime


def write_in_another_process(url: str) -> str:
    written = subprocess.run(
        [sys.executable, "-c", WRITER, url],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return written.stdout.strip()


def test_a_query_after_a_command_reads_the_write_on_the_replica(
    replicated: ReplicatedDatabase,
) -> None:
    with replicated_store(replicated, wait=5) as store:
        running_run(store, session_id="session-1")
        follow_up_id = queue_as_session(store, RUN, "request-1")

        queue = store.follow_up_queue(RUN)
        run = store.get_run(RUN)

        assert queue is not None
        assert [follow_up.follow_up_id for follow_up in queue.follow_ups] == [follow_up_id]
        assert run is not None
        assert run.status == "running"
        counted = stats(runtime_of(store))
        assert (counted.replica, counted.primary) == (2, 0)


def test_a_write_in_another_process_is_read_on_the_replica_after_its_token(
    replicated: ReplicatedDatabase,
) -> None:
    token = write_in_another_process(replicated.primary_url)

    with replicated_store(replicated, wait=5) as store:
        store.reading_after(token)

        run = store.get_run(RUN)
        listed = [run.run_id for run in store.list_runs().runs]

        assert run is not None
        assert run.status == "running"
        assert listed == [RUN]
        counted = stats(runtime_of(store))
        assert (counted.replica, counted.primary) == (2, 0)


def test_a_token_is_never_answered_stale_by_a_lagging_replica(
    replicated: ReplicatedDatabase,
) -> None:
    with replicated_store(replicated, wait=0.2) as store:
        replicated.replica.pause_replay()
        token = write_in_another_process(replicated.primary_url)
        # Without the token nothing is owed: the lagging replica answers, without the run.
        assert store.get_run(RUN) is None

        store.reading_after(token)
        run = store.get_run(RUN)
        listed = [run.run_id for run in store.list_runs().runs]

        assert run is not None
        assert run.status == "running"
        assert listed == [RUN]
        counted = stats(runtime_of(store))
        assert (counted.replica, counted.primary) == (1, 2)


def test_a_lagging_replica_is_waited_for_then_the_primary_answers(
    replicated: ReplicatedDatabase,
) -> None:
    with replicated_store(replicated, wait=0.3) as store:
        running_run(store, session_id="session-1")
        replicated.replica.pause_replay()
        store.record_progress(RUN, status="waiting", waiting_on="review")

        started = time.monotonic()
        run = store.get_run(RUN)
        took = time.monotonic() - started

        assert run is not None
        assert run.status == "waiting"
        assert took >= 0.3
        assert stats(runtime_of(store)).primary == 1


def test_a_read_waits_for_a_replica_that_catches_up_within_the_wait(
    replicated: ReplicatedDatabase,
) -> None:
    with replicated_store(replicated, wait=10) as store:
        running_run(store, session_id="session-1")
        replicated.replica.pause_replay()
        store.record_progress(RUN, status="waiting", waiting_on="review")
        resume = threading.Timer(0.5, replicated.replica.resume_replay)
        resume.start()

        started = time.monotonic()
        run = store.get_run(RUN)
        took = time.monotonic() - started
        resume.join()

        assert run is not None
        assert run.status == "waiting"
        assert took >= 0.4
        counted = stats(runtime_of(store))
        assert (counted.replica, counted.waited, counted.primary) == (1, 1, 0)


def test_a_stopped_replica_sends_reads_to_the_primary_at_once(
    replicated: ReplicatedDatabase, caplog: pytest.LogCaptureFixture
) -> None:
    with replicated_store(replicated, wait=5) as store:
        running_run(store, session_id="session-1")
        replicated.replica.stop()
        store.record_progress(RUN, status="waiting", waiting_on="review")

        started = time.monotonic()
        run = store.get_run(RUN)
        took = time.monotonic() - started

        assert run is not None
        assert run.status == "waiting"
        # A refused connection is known at once: no waiting for a replica that is down.
        assert took < 2
        counted = stats(runtime_of(store))
        assert (counted.replica, counted.primary) == (0, 1)
    # The operator is told which replica is down, without its password.
    assert f"127.0.0.1:{replicated.replica.port}" in caplog.text
    assert PASSWORD not in caplog.text


def test_reads_go_back_to_a_replica_once_it_is_back(replicated: ReplicatedDatabase) -> None:
    with replicated_store(replicated, wait=1) as store:
        running_run(store, session_id="session-1")
        replicated.replica.stop()
        assert store.get_run(RUN) is not None
        replicated.replica.start()

        deadline = time.monotonic() + 30
        while stats(runtime_of(store)).replica == 0:
            if time.monotonic() > deadline:
                pytest.fail("reads never went back to the replica")
            run = store.get_run(RUN)
            assert run is not None
            assert run.status == "running"
            time.sleep(0.1)


def test_read_model_digests_on_the_replica_equal_the_primarys(
    replicated: ReplicatedDatabase,
) -> None:
    with replicated_store(replicated, wait=5) as store:
        running_run(store, session_id="session-1")
        for number in range(3):
            queue_as_session(store, RUN, f"request-{number}")
        store.record_progress(RUN, status="waiting", waiting_on="review")
        names = store.projection_names()
        on_replica = {name: store.read_model_digest(name) for name in names}
        assert stats(runtime_of(store)).replica == len(names)

    with open_store(replicated.primary_url) as primary:
        on_primary = {name: primary.read_model_digest(name) for name in names}

    assert on_replica == on_primary


def test_the_event_log_is_read_on_the_primary_even_with_a_replica_at_hand(
    replicated: ReplicatedDatabase,
) -> None:
    with replicated_store(replicated, wait=5) as store:
        running_run(store, session_id="session-1")
        replicated.replica.pause_replay()
        store.record_progress(RUN, status="waiting", waiting_on="review")

        logged = store.event_log(limit=1000)

        # Its gap-safe paging needs the primary's view of open writers (see README).
        assert logged[-1].position == ReadPosition.from_token(store.position_token()).position
        counted = stats(runtime_of(store))
        assert (counted.replica, counted.primary) == (0, 0)


def test_a_read_model_is_not_read_on_a_replica_that_has_the_events_but_not_their_views(
    replicated: ReplicatedDatabase,
) -> None:
    with (
        replicated_store(replicated, wait=0.2) as reader,
        open_store(replicated.primary_url, embedded_projections=False) as writer,
    ):
        # A writer that leaves its read models to others: the views of its run are written
        # by whoever catches up, in a commit after the run's own. The reader, which projects
        # (it leads), would hear of the run's commit and project it at once: held still until
        # the replica stops replaying, so that the replica has the events and not the views.
        with runtime_of(reader).projector.paused():
            running_run(writer, session_id="session-1")
            token = writer.position_token()
            replicated.wait_for_replica()
            replicated.replica.pause_replay()
        reader.reading_after(token)

        # The reader catches the views up on the primary; the replica has the run's events
        # (the token's WAL position) but not the views' commit.
        listed = [run.run_id for run in reader.list_runs().runs]

        assert listed == [RUN]
        counted = stats(runtime_of(reader))
        assert (counted.replica, counted.primary) == (0, 1)
