"""An aggregate not in the repository's cache loads from its latest snapshot and the events
after it (``domain.cached_aggregates``): the state a full replay gives, on every backend, and
on PostgreSQL in one round trip where the library's two reads took two."""

from __future__ import annotations

from itertools import count
from uuid import uuid4

import pytest
from eventsourcing.application import AggregateNotFoundError

from runledger.domain.ports import SnapshotReads
from runledger.domain.runs import Run, run_aggregate_id
from runledger.infrastructure.commits.executor import forget_cached
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.integration.test_probed_reads import usual_trips
from tests.integration.test_snapshots import _queue_many
from tests.support.round_trips import round_trip_proxy

RUN_ID = run_aggregate_id("run-1")
POOL_CONNECTIONS = 15
"""More than a store's pool holds (its size and overflow)."""


def cold_load(runtime: StoreRuntime) -> Run:
    """The run as a process that never cached it loads it."""
    cache = runtime.app.repository.cache
    assert cache is not None
    # Evicted, not ``cache.clear()``: the library's LRU cache keeps its entries through that.
    forget_cached(runtime.app, [RUN_ID])
    assert RUN_ID not in cache.cache
    loaded: object = runtime.app.repository.get(RUN_ID)
    assert isinstance(loaded, Run)
    return loaded


def replayed(runtime: StoreRuntime) -> Run:
    """The run from every one of its events, no snapshot."""
    run = None
    for event in runtime.app.events.get(RUN_ID):
        run = event.mutate(run)  # type: ignore[attr-defined]
    assert isinstance(run, Run)
    return run


def snapshot_versions(runtime: StoreRuntime) -> list[int]:
    assert runtime.app.snapshots is not None
    return [s.originator_version for s in runtime.app.snapshots.get(RUN_ID)]


def test_only_postgresql_reads_a_snapshot_and_its_events_at_once(
    runtime: StoreRuntime,
) -> None:
    recorder = runtime.app.repository.event_store.recorder
    assert isinstance(recorder, SnapshotReads) == (runtime.backend == "postgresql")


def test_a_cold_load_from_a_snapshot_equals_a_full_replay(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    _queue_many(store, 120)
    store.pause_run("run-1", status_detail="paused")
    assert snapshot_versions(runtime) == [100]

    loaded, full = cold_load(runtime), replayed(runtime)

    assert loaded.version == full.version == 123
    assert vars(loaded) == vars(full)


def test_a_cold_load_of_a_run_snapshotted_at_its_last_version(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    _queue_many(store, 98)
    assert snapshot_versions(runtime) == [100]

    loaded = cold_load(runtime)

    assert loaded.version == 100
    assert vars(loaded) == vars(replayed(runtime))


def test_a_cold_load_without_a_snapshot_replays_every_event(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    _queue_many(store, 5)
    assert snapshot_versions(runtime) == []

    assert vars(cold_load(runtime)) == vars(replayed(runtime))


def test_a_cold_load_of_an_aggregate_with_no_events_is_not_found(runtime: StoreRuntime) -> None:
    with pytest.raises(AggregateNotFoundError):
        runtime.app.repository.get(uuid4())


@pytest.mark.postgres
def test_on_postgresql_a_cold_load_is_one_round_trip_and_a_new_run_two(
    postgres_store_url: str,
) -> None:
    with (
        round_trip_proxy(postgres_store_url) as proxy,
        open_runtime(proxy.url(postgres_store_url)) as runtime,
    ):
        store = WorkflowStore(runtime)
        _queue_many(store, 120)
        assert snapshot_versions(runtime) == [100]

        numbers = count()

        def create() -> None:
            store.create_run(f"new-{next(numbers)}", workflow_name="w", input={})

        # Each pooled connection prepares a statement the first time it runs it (a round
        # trip of its own): every connection of the pool has, after these.
        for _ in range(2 * POOL_CONNECTIONS):
            cold_load(runtime)
            create()
        assert usual_trips(proxy, lambda: cold_load(runtime)) == 1
        # Its id checked unused (one read of a run that has no snapshot and no events),
        # then its commit.
        assert usual_trips(proxy, create) == 2
