"""Database faults against a throwaway PostgreSQL cluster: each one a clear, retryable
``StorageUnavailableError`` naming its cause and endpoint (never the password), quickly, and a
store that recovers by itself once the server is back."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import psycopg
import pytest

from runledger.domain import Actor
from runledger.domain.errors import StorageUnavailableError
from runledger.domain.ids import follow_up_id_for
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.clusters import PASSWORD, ThrowawayCluster, free_port

pytestmark = pytest.mark.slow

SESSION = "session-origin"
FAST_FAILURE_SECONDS = 3.0
"""What "within a few seconds" means for open_store on an unusable server."""


def failure_of(call: Callable[[], Any]) -> tuple[StorageUnavailableError, float]:
    """The StorageUnavailableError ``call`` raises, and the seconds it took to raise it."""
    started = time.monotonic()
    with pytest.raises(StorageUnavailableError) as raised:
        call()
    return raised.value, time.monotonic() - started


def assert_names_endpoint(error: StorageUnavailableError, *, port: int, database: str) -> None:
    """The error says where it failed and who tried, and is safe to print."""
    message = str(error)
    assert error.retryable
    assert error.code == "store.unavailable"
    for part in ("127.0.0.1", str(port), database, "postgres@"):
        assert part in message
    assert PASSWORD not in message
    assert PASSWORD not in repr(error)


def start_run(store: WorkflowStore, run_id: str) -> None:
    store.create_run(run_id, workflow_name="faults", input={"case": run_id})
    store.bind_origin_session(run_id, SESSION)


def queue(store: WorkflowStore, run_id: str, request_id: str) -> Any:
    return store.queue_follow_up(
        run_id,
        request_id=request_id,
        target_session_id=SESSION,
        actor=Actor(type="session", id=SESSION),
        source="fault-test",
        prompt=f"prompt {request_id}",
    )


# -- open_store on a server it cannot use -----------------------------------------------------


def test_open_store_on_a_port_without_a_server_fails_fast_as_refused() -> None:
    port = free_port()
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/runledger"

    error, seconds = failure_of(lambda: open_store(url))

    assert error.cause == "refused"
    assert_names_endpoint(error, port=port, database="runledger")
    assert seconds < FAST_FAILURE_SECONDS


def test_open_store_on_an_unknown_database_names_it(running_cluster: ThrowawayCluster) -> None:
    error, seconds = failure_of(lambda: open_store(running_cluster.url("no_such_database")))

    assert error.cause == "unknown database"
    assert 'database "no_such_database" does not exist' in str(error)
    assert_names_endpoint(error, port=running_cluster.port, database="no_such_database")
    assert seconds < FAST_FAILURE_SECONDS


def test_open_store_as_an_unknown_user_fails_authentication(
    running_cluster: ThrowawayCluster,
) -> None:
    url = running_cluster.url("postgres", user="nobody_here")

    error, seconds = failure_of(lambda: open_store(url))

    assert error.cause == "authentication failed"
    assert 'role "nobody_here" does not exist' in str(error)
    assert "nobody_here@127.0.0.1" in str(error)
    assert PASSWORD not in str(error)
    assert seconds < FAST_FAILURE_SECONDS


def test_open_store_on_a_full_server_says_it_is_full(running_cluster: ThrowawayCluster) -> None:
    running_cluster.stop()
    running_cluster.start(max_connections="3", superuser_reserved_connections="0")
    held = [running_cluster.admin() for _ in range(3)]
    try:
        error, seconds = failure_of(lambda: open_store(running_cluster.url("postgres")))
    finally:
        for connection in held:
            connection.close()

    assert error.cause == "server full (too many connections)"
    assert_names_endpoint(error, port=running_cluster.port, database="postgres")
    assert seconds < FAST_FAILURE_SECONDS


# -- faults while the store is open ----------------------------------------------------------


def test_an_exhausted_pool_fails_once_within_the_pool_timeout(database_url: str) -> None:
    url = f"{database_url}?pool_size=1&max_overflow=0&pool_timeout=1"
    with open_runtime(url, embedded_projections=False) as runtime:
        store = WorkflowStore(runtime)
        datastore = runtime.storage.datastore  # type: ignore[attr-defined]
        with datastore.get_connection():
            error, seconds = failure_of(lambda: store.get_run("run-busy"))

        assert error.cause == "pool exhausted"
        assert "pool_size=1, max_overflow=0" in str(error)
        assert 1.0 <= seconds < 2.5
        assert store.get_run("run-busy") is None


def test_an_outage_longer_than_the_retries_fails_clearly_then_recovers_without_reopening(
    running_cluster: ThrowawayCluster, database_url: str
) -> None:
    with open_store(f"{database_url}?pool_timeout=2") as store:
        start_run(store, "run-outage")
        running_cluster.stop()
        try:
            error, seconds = failure_of(lambda: queue(store, "run-outage", "during-outage"))
            read_error, read_seconds = failure_of(lambda: store.follow_up_queue("run-outage"))
        finally:
            running_cluster.start()

        assert error.cause in {"refused", "connection lost"}
        assert_names_endpoint(error, port=running_cluster.port, database=database_url[-9:])
        assert seconds < 8.0
        # A query waits for a connection once (pool_timeout=2), not once per catch-up attempt.
        assert read_error.cause in {"refused", "connection lost"}
        assert_names_endpoint(read_error, port=running_cluster.port, database=database_url[-9:])
        assert read_seconds < 4.0
        back = time.monotonic()
        queued = None
        while queued is None and time.monotonic() - back < 30:
            try:
                queued = queue(store, "run-outage", "during-outage")
            except StorageUnavailableError:
                time.sleep(0.2)
        recovery = time.monotonic() - back

        print(f"\noutage: failed in {seconds:.2f}s ({error.cause}), recovered in {recovery:.2f}s")
        assert queued is not None, "the store did not recover within 30 s of the restart"
        assert queued.follow_up.order == 1
        assert recovery < 15.0
        queue_view = store.follow_up_queue("run-outage")
        assert queue_view is not None
        assert [f.request_id for f in queue_view.follow_ups] == ["during-outage"]


class Writer(threading.Thread):
    """Queues follow-ups on its own run until told to stop, retrying each one on a storage
    fault until it is acknowledged."""

    def __init__(self, store: WorkflowStore, run_id: str, stop: threading.Event) -> None:
        super().__init__(name=f"writer-{run_id}")
        self.store, self.run_id, self.stop = store, run_id, stop
        self.acknowledged: list[str] = []
        self.faults = 0
        self.unexpected: list[BaseException] = []

    def run(self) -> None:
        number = 0
        while not self.stop.is_set():
            request_id = f"{self.run_id}-{number}"
            try:
                queue(self.store, self.run_id, request_id)
            except StorageUnavailableError:
                self.faults += 1
                time.sleep(0.05)
                continue
            except BaseException as error:
                self.unexpected.append(error)
                return
            self.acknowledged.append(request_id)
            number += 1


def test_restarts_under_load_lose_no_acknowledged_command(
    running_cluster: ThrowawayCluster, database_url: str
) -> None:
    # (how the server stops, seconds it stays down): the short outages are absorbed by the
    # recorders' retries; the long ones outlast them and reach the writers as faults.
    restarts = [
        ("fast", 0.3),
        ("immediate", 0.3),
        ("immediate", 3.0),
        ("fast", 0.3),
        ("immediate", 3.0),
    ]
    runs = [f"run-load-{n}" for n in range(3)]
    with open_store(f"{database_url}?pool_timeout=2") as store:
        for run_id in runs:
            start_run(store, run_id)
        stop = threading.Event()
        writers = [Writer(store, run_id, stop) for run_id in runs]
        for writer in writers:
            writer.start()
        acknowledged_before_each: list[int] = []
        try:
            for mode, down in restarts:
                time.sleep(1.0)
                acknowledged_before_each.append(sum(len(w.acknowledged) for w in writers))
                running_cluster.stop(mode)  # type: ignore[arg-type]
                time.sleep(down)
                running_cluster.start()
            time.sleep(1.5)
        finally:
            stop.set()
            for writer in writers:
                writer.join(timeout=60)
        total = sum(len(w.acknowledged) for w in writers)
        faults = sum(w.faults for w in writers)
        print(f"\n{len(restarts)} restarts, {total} acknowledged follow-ups, {faults} faults")

        assert [w.unexpected for w in writers] == [[], [], []]
        assert faults > 0, "no fault reached a writer: the long outages were not felt"
        # Writers kept being acknowledged between and after the restarts.
        assert acknowledged_before_each == sorted(set(acknowledged_before_each))
        assert total > acknowledged_before_each[-1]

    with open_store(database_url) as reopened:
        for writer in writers:
            orders = [
                follow_up.order if follow_up else None
                for request_id in writer.acknowledged
                for follow_up in [
                    reopened.get_follow_up(follow_up_id_for(writer.run_id, request_id))
                ]
            ]
            # Every acknowledged follow-up is stored, once, in the order it was acknowledged.
            assert orders == list(range(1, len(writer.acknowledged) + 1))
        # Positions lost in a crash leave gaps the follower may first wait at.
        deadline = time.monotonic() + 30
        while any(status.lag for status in reopened.projection_status()):
            assert time.monotonic() < deadline, reopened.projection_status()
        for writer in writers:
            queue_view = reopened.follow_up_queue(writer.run_id)
            assert queue_view is not None
            assert [f.request_id for f in queue_view.follow_ups] == writer.acknowledged


def test_a_server_restart_between_commands_is_invisible(
    running_cluster: ThrowawayCluster, database_url: str
) -> None:
    with open_store(database_url) as store:
        start_run(store, "run-restart")
        running_cluster.stop("fast")
        running_cluster.start()

        queued = queue(store, "run-restart", "after-restart")

        assert queued.follow_up.order == 1
        with psycopg.connect(database_url.replace(f":{PASSWORD}", "")) as check:
            (count,) = check.execute("SELECT count(*) FROM runledger_events").fetchone() or (0,)
        assert count > 0
