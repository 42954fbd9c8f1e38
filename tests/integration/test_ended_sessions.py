"""A store whose sessions the server ends (``pg_terminate_backend``, a restart) fails the
call that meets it, as ``StorageUnavailableError``, and the next calls work: the pool's idle
connections, ended too, are tested and replaced at that first failure, not met one by one."""

from __future__ import annotations

import time

import psycopg
import pytest

from runledger.domain.errors import StorageUnavailableError
from runledger.infrastructure import open_store
from runledger.infrastructure.views.postgres import PostgresViewStore

pytestmark = pytest.mark.postgres

END_THE_SESSIONS = (
    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


def test_one_call_fails_when_the_server_ends_every_session_then_the_store_works(
    postgres_store_url: str,
) -> None:
    with open_store(f"{postgres_store_url}?pool_size=4") as store:
        store.create_run("run-1", workflow_name="echo", input={})
        views = store._runtime.views
        assert isinstance(views, PostgresViewStore)
        pool = views.datastore.pool
        deadline = time.monotonic() + 30
        while pool.get_stats()["pool_available"] < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pool.get_stats()["pool_available"] >= 4, "the pool keeps four idle connections"
        with psycopg.connect(postgres_store_url, autocommit=True) as admin:
            ended = admin.execute(END_THE_SESSIONS).fetchone()
        assert ended is not None
        assert ended[0] >= 4

        # Straight to the views' pool, past the retries the store's calls make.
        failures = 0
        for _ in range(6):
            try:
                assert {state.name for state in views.tracking()} == set(store.projection_names())
            except StorageUnavailableError:
                failures += 1
        store.create_run("run-2", workflow_name="echo", input={})

        assert failures <= 1
        assert store.get_run("run-2") is not None
