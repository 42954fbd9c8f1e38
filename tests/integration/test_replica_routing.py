"""Replica routing on the machine's own PostgreSQL (no replica there): a server that is not
replaying is never read as a replica, and a replica that refuses connections sends reads to
the primary at once. The real streaming replica's tests are in ``tests/replicas``."""

from __future__ import annotations

import time
from typing import cast
from urllib.parse import quote

import pytest

from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.storage.postgres import PostgresStorage
from runledger.infrastructure.storage.replicas import ReplicaStats
from runledger.infrastructure.store import WorkflowStore
from tests.support.clusters import free_port
from tests.support.scenario import RUN, running_run

pytestmark = pytest.mark.postgres


def with_replica(url: str, replica: str, wait: float) -> str:
    separator = "&" if "?" in url else "?"
    return f"{url}{separator}replica_url={quote(replica, safe='')}&replica_wait={wait:g}"


def read_run_twice(url: str) -> tuple[ReplicaStats, float]:
    with open_runtime(url) as runtime:
        store = WorkflowStore(runtime)
        running_run(store, session_id="session-1")
        started = time.monotonic()
        runs = [store.get_run(RUN), store.list_runs().runs[0]]
        took = time.monotonic() - started
        assert [run.status for run in runs if run is not None] == ["running", "running"]
        replicas = cast(PostgresStorage, runtime.storage).replicas
        assert replicas is not None
        return replicas.stats, took


def test_a_server_that_is_not_replaying_is_never_read_as_a_replica(
    postgres_store_url: str,
) -> None:
    # The primary itself named as its replica: it has every write, but it replays nothing,
    # and its positions are not a replica's.
    counted, took = read_run_twice(with_replica(postgres_store_url, postgres_store_url, 0.1))

    assert (counted.replica, counted.primary) == (0, 2)
    assert took >= 0.2


def test_a_replica_that_refuses_connections_sends_reads_to_the_primary_at_once(
    postgres_store_url: str,
) -> None:
    nowhere = f"postgresql://reader:secret@127.0.0.1:{free_port()}/runs"

    counted, took = read_run_twice(with_replica(postgres_store_url, nowhere, 5))

    assert (counted.replica, counted.primary) == (0, 2)
    assert took < 2
