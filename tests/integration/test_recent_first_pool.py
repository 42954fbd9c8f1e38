"""A PostgreSQL store's pool hands out the idle connection returned last
(``storage.recent_first_pool``): calls made one at a time stay on one warm connection, whose
server process has the tables' catalog entries loaded and whose statements psycopg has
prepared, instead of going round the whole pool; calls made at once still get one each."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from eventsourcing.postgres import PostgresDatastore

from runledger.infrastructure import open_store
from runledger.infrastructure.storage.recent_first_pool import RecentFirstPool
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.postgres import PostgresViewStore
from tests.integration.test_same_commit_views import queue_as_session

pytestmark = pytest.mark.postgres

POOL_SIZE = 4


@pytest.fixture
def store(postgres_store_url: str) -> Iterator[WorkflowStore]:
    with open_store(f"{postgres_store_url}?pool_size={POOL_SIZE}") as opened:
        opened.create_run("run-1", workflow_name="echo", input={})
        yield opened


def full_pool(store: WorkflowStore) -> PostgresDatastore:
    """The store's datastore once its pool holds ``POOL_SIZE`` idle connections."""
    views = store._runtime.views
    assert isinstance(views, PostgresViewStore)
    datastore = views.datastore
    deadline = time.monotonic() + 30
    while datastore.pool.get_stats()["pool_available"] < POOL_SIZE:
        assert time.monotonic() < deadline, "the pool fills to its size"
        time.sleep(0.05)
    return datastore


def backend_of_next_call(datastore: PostgresDatastore) -> int:
    with datastore.get_connection() as connection:
        pid: int = connection.info.backend_pid
        return pid


def test_the_store_pool_is_recent_first(store: WorkflowStore) -> None:
    assert isinstance(full_pool(store).pool, RecentFirstPool)


def test_calls_one_at_a_time_stay_on_one_connection(store: WorkflowStore) -> None:
    datastore = full_pool(store)

    backends = {backend_of_next_call(datastore) for _ in range(3 * POOL_SIZE)}

    # Taking the connection idle longest, these calls went round all four. The store's own
    # idle look (once a second) may hold the warm one at the moment of one call: then two.
    assert len(backends) <= 2


def test_the_connection_returned_last_is_the_next_one_handed_out(store: WorkflowStore) -> None:
    datastore = full_pool(store)
    with datastore.get_connection() as first, datastore.get_connection() as second:
        # Calls made at once get a connection each.
        assert first.info.backend_pid != second.info.backend_pid
        first_pid, second_pid = first.info.backend_pid, second.info.backend_pid
    # ``second`` went back first, then ``first``.
    assert backend_of_next_call(datastore) == first_pid
    with datastore.get_connection() as again, datastore.get_connection() as other:
        assert (again.info.backend_pid, other.info.backend_pid) == (first_pid, second_pid)


def test_concurrent_commands_still_share_the_pool_and_lose_no_write(
    store: WorkflowStore,
) -> None:
    full_pool(store)
    errors: list[BaseException] = []

    def queue(worker: int) -> None:
        try:
            for index in range(10):
                queue_as_session(store, "run-1", f"request-{worker}-{index}")
        except BaseException as error:
            errors.append(error)

    store.bind_origin_session("run-1", "session-1")
    threads = [threading.Thread(target=queue, args=(worker,)) for worker in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    assert errors == []
    queue_now = store.follow_up_queue("run-1")
    assert queue_now is not None
    assert len(queue_now.follow_ups) == 40
