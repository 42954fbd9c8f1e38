"""The EventStorage contract, written once and run on memory, a SQLite file and PostgreSQL."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING
from uuid import UUID, uuid4

import pytest
from eventsourcing.persistence import IntegrityError, Notification, StoredEvent

from runledger.infrastructure.commits.mapper import LedgerStoredEvent
from runledger.infrastructure.commits.ports import EventStorage

if TYPE_CHECKING:
    from multiprocessing.synchronize import Event as ProcessEvent

PERSISTENT_BACKENDS = [
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


def event(
    originator_id: UUID | str,
    version: int,
    *,
    topic: str = "run.progressed",
    run_id: str | None = None,
    lookup_key: str | None = None,
) -> LedgerStoredEvent:
    return LedgerStoredEvent(
        originator_id=originator_id,
        originator_version=version,
        topic=topic,
        state=f'{{"version": {version}}}'.encode(),
        run_id=run_id,
        lookup_key=lookup_key,
    )


def plain(originator_id: UUID, version: int, topic: str = "run.progressed") -> StoredEvent:
    return StoredEvent(
        originator_id=originator_id,
        originator_version=version,
        topic=topic,
        state=b"{}",
    )


def ids(notifications: Sequence[Notification]) -> list[int]:
    return [n.id for n in notifications]


def versions(stored_events: Sequence[StoredEvent]) -> list[int]:
    return [s.originator_version for s in stored_events]


class TestEventStorageContract:
    def test_an_empty_storage_has_no_events(self, storage: EventStorage) -> None:
        assert storage.max_position() == 0
        assert storage.events.max_notification_id() is None
        assert list(storage.select_log(after=0, limit=10)) == []
        assert list(storage.events.select_notifications(start=None, limit=10)) == []
        assert storage.originator_ids_by_key("any") == []
        assert list(storage.events.select_events(uuid4())) == []

    def test_insert_returns_ascending_positions_in_batch_order(self, storage: EventStorage) -> None:
        a, b = uuid4(), uuid4()

        first = storage.events.insert_events([event(a, 1), event(a, 2), event(b, 1)])
        second = storage.events.insert_events([event(b, 2)])

        assert first is not None
        assert second is not None
        positions = [*first, *second]
        assert positions == sorted(set(positions))
        assert ids(storage.select_log(after=0, limit=10)) == positions
        assert storage.max_position() == positions[-1]
        assert storage.events.max_notification_id() == positions[-1]

    def test_an_empty_insert_returns_no_positions(self, storage: EventStorage) -> None:
        assert list(storage.events.insert_events([]) or []) == []
        assert storage.max_position() == 0

    def test_one_insert_writes_all_of_its_events(self, storage: EventStorage) -> None:
        a, b = uuid4(), uuid4()

        storage.events.insert_events([event(a, 1), event(b, 1), event(a, 2)])

        assert versions(storage.events.select_events(a)) == [1, 2]
        assert versions(storage.events.select_events(b)) == [1]
        assert len(storage.select_log(after=0, limit=10)) == 3

    def test_a_duplicate_version_raises_and_writes_nothing_of_its_batch(
        self, storage: EventStorage
    ) -> None:
        a, b = uuid4(), uuid4()
        storage.events.insert_events([event(a, 1)])
        log_before = list(storage.select_log(after=0, limit=10))
        max_before = storage.max_position()

        with pytest.raises(IntegrityError):
            storage.events.insert_events([event(b, 1), event(a, 2), event(a, 1, topic="other")])

        assert storage.max_position() == max_before
        assert list(storage.select_log(after=0, limit=10)) == log_before
        assert list(storage.events.select_events(b)) == []
        assert versions(storage.events.select_events(a)) == [1]
        assert storage.events.select_events(a)[0].topic == "run.progressed"

    def test_a_version_twice_in_one_batch_raises_and_writes_nothing(
        self, storage: EventStorage
    ) -> None:
        a = uuid4()

        with pytest.raises(IntegrityError):
            storage.events.insert_events([event(a, 1), event(a, 1)])

        assert storage.max_position() == 0
        assert list(storage.events.select_events(a)) == []

    def test_positions_keep_ascending_after_a_failed_insert(self, storage: EventStorage) -> None:
        a = uuid4()
        (first,) = storage.events.insert_events([event(a, 1)]) or []
        with pytest.raises(IntegrityError):
            storage.events.insert_events([event(a, 1)])

        (second,) = storage.events.insert_events([event(a, 2)]) or []

        assert second > first
        assert ids(storage.select_log(after=0, limit=10)) == [first, second]

    def test_select_events_filters_orders_and_limits_by_version(
        self, storage: EventStorage
    ) -> None:
        a, other = uuid4(), uuid4()
        storage.events.insert_events([event(a, v) for v in range(1, 6)])
        storage.events.insert_events([event(other, 1)])
        select = storage.events.select_events

        assert versions(select(a)) == [1, 2, 3, 4, 5]
        assert versions(select(a, gt=2)) == [3, 4, 5]
        assert versions(select(a, lte=3)) == [1, 2, 3]
        assert versions(select(a, gt=1, lte=3)) == [2, 3]
        assert versions(select(a, desc=True)) == [5, 4, 3, 2, 1]
        assert versions(select(a, desc=True, limit=1)) == [5]
        assert versions(select(a, lte=4, desc=True, limit=1)) == [4]
        assert versions(select(a, limit=2)) == [1, 2]
        assert versions(select(a, gt=5)) == []

    def test_select_events_returns_what_was_stored(self, storage: EventStorage) -> None:
        a = uuid4()
        storage.events.insert_events([event(a, 1, topic="run.created")])

        (stored,) = storage.events.select_events(a)

        assert stored.originator_id == a
        assert stored.originator_version == 1
        assert stored.topic == "run.created"
        assert stored.state == b'{"version": 1}'
        assert isinstance(stored.state, bytes)

    def test_originator_ids_come_back_as_uuids_when_given_as_strings(
        self, storage: EventStorage
    ) -> None:
        a = uuid4()
        storage.events.insert_events([event(str(a), 1, run_id="r", lookup_key="k")])
        storage.snapshots.insert_events([event(str(a), 1)])

        read = [
            storage.events.select_events(str(a))[0].originator_id,
            storage.events.select_events(a)[0].originator_id,
            storage.events.select_notifications(start=None, limit=1)[0].originator_id,
            storage.select_log(after=0, limit=1)[0].originator_id,
            storage.select_log(after=0, limit=1, run_id="r")[0].originator_id,
            storage.originator_ids_by_key("k")[0],
            storage.snapshots.select_events(str(a))[0].originator_id,
        ]

        assert read == [a] * len(read)
        assert all(type(originator_id) is UUID for originator_id in read)

    def test_select_notifications_honours_start_stop_topics_and_inclusivity(
        self, storage: EventStorage
    ) -> None:
        a = uuid4()
        positions = storage.events.insert_events(
            [event(a, 1, topic="t1"), event(a, 2, topic="t2"), event(a, 3, topic="t3")]
        )
        assert positions is not None
        p1, p2, p3 = positions
        select = storage.events.select_notifications

        assert ids(select(start=None, limit=10)) == [p1, p2, p3]
        assert ids(select(start=p2, limit=10)) == [p2, p3]
        assert ids(select(start=p2, limit=10, inclusive_of_start=False)) == [p3]
        assert ids(select(start=p3, limit=10, inclusive_of_start=False)) == []
        assert ids(select(start=None, limit=10, stop=p2)) == [p1, p2]
        assert ids(select(start=p1, limit=10, stop=p2, inclusive_of_start=False)) == [p2]
        assert ids(select(start=p2, limit=1)) == [p2]
        assert ids(select(start=None, limit=10, topics=["t1", "t3"])) == [p1, p3]
        assert ids(select(start=p1, limit=1, topics=("t3",))) == [p3]
        assert ids(select(start=None, limit=10, topics=["none"])) == []

    def test_select_log_reads_after_a_position_up_to_a_limit(self, storage: EventStorage) -> None:
        a = uuid4()
        positions = list(storage.events.insert_events([event(a, v) for v in range(1, 6)]) or [])

        page = storage.select_log(after=positions[1], limit=2)

        assert ids(page) == positions[2:4]
        assert all(isinstance(n, Notification) for n in page)
        assert ids(storage.select_log(after=positions[-1], limit=10)) == []

    def test_select_log_with_a_run_id_reads_only_that_runs_events(
        self, storage: EventStorage
    ) -> None:
        a, b, c = uuid4(), uuid4(), uuid4()
        positions = list(
            storage.events.insert_events(
                [
                    event(a, 1, run_id="run-1"),
                    event(b, 1, run_id="run-2"),
                    event(c, 1, run_id="run-1"),
                    event(a, 2, run_id="run-1"),
                ]
            )
            or []
        )
        storage.events.insert_events([plain(uuid4(), 1)])

        run_1 = storage.select_log(after=0, limit=10, run_id="run-1")

        assert ids(run_1) == [positions[0], positions[2], positions[3]]
        assert [n.originator_id for n in run_1] == [a, c, a]
        assert ids(storage.select_log(after=positions[0], limit=1, run_id="run-1")) == [
            positions[2]
        ]
        assert ids(storage.select_log(after=0, limit=10, run_id="run-3")) == []

    def test_originator_ids_by_key_are_distinct_in_first_position_order(
        self, storage: EventStorage
    ) -> None:
        a, b, c = uuid4(), uuid4(), uuid4()
        storage.events.insert_events([event(b, 1, lookup_key="source-1")])
        storage.events.insert_events([event(a, 1, lookup_key="source-1")])
        storage.events.insert_events([event(b, 2, lookup_key="source-1")])
        storage.events.insert_events([event(c, 1, lookup_key="source-2")])

        assert storage.originator_ids_by_key("source-1") == [b, a]
        assert storage.originator_ids_by_key("source-2") == [c]
        assert storage.originator_ids_by_key("source-3") == []

    def test_plain_stored_events_are_logged_without_run_or_key(self, storage: EventStorage) -> None:
        a = uuid4()

        (position,) = storage.events.insert_events([plain(a, 1)]) or []

        assert ids(storage.select_log(after=0, limit=10)) == [position]
        assert list(storage.select_log(after=0, limit=10, run_id="")) == []
        assert storage.originator_ids_by_key("") == []

    def test_snapshots_round_trip_apart_from_the_log(self, storage: EventStorage) -> None:
        a = uuid4()
        snapshot_5 = plain(a, 5, topic="run.snapshot")
        snapshot_9 = plain(a, 9, topic="run.snapshot")

        assert storage.snapshots.insert_events([snapshot_5]) in (None, [])
        storage.snapshots.insert_events([snapshot_9])

        assert list(storage.snapshots.select_events(a, desc=True, limit=1)) == [snapshot_9]
        assert list(storage.snapshots.select_events(a, lte=8, desc=True, limit=1)) == [snapshot_5]
        assert storage.max_position() == 0
        assert list(storage.events.select_events(a)) == []

    def test_a_snapshot_version_is_stored_once(self, storage: EventStorage) -> None:
        a = uuid4()
        storage.snapshots.insert_events([plain(a, 5, topic="run.snapshot")])

        # Re-inserting may be ignored or refused, but never duplicates or replaces the row.
        with contextlib.suppress(IntegrityError):
            storage.snapshots.insert_events([plain(a, 5, topic="changed")])

        assert [s.topic for s in storage.snapshots.select_events(a)] == ["run.snapshot"]


@pytest.mark.parametrize("storage_backend", PERSISTENT_BACKENDS, indirect=True)
def test_a_second_storage_on_the_same_store_sees_the_first_ones_writes(
    open_storage: Callable[[], EventStorage],
) -> None:
    writer, reader = open_storage(), open_storage()
    a = uuid4()

    positions = writer.events.insert_events([event(a, 1, run_id="run-1", lookup_key="key-1")])
    writer.snapshots.insert_events([plain(a, 1, topic="run.snapshot")])

    assert reader.max_position() == (positions or [0])[-1]
    assert ids(reader.select_log(after=0, limit=10, run_id="run-1")) == positions
    assert versions(reader.events.select_events(a)) == [1]
    assert reader.originator_ids_by_key("key-1") == [a]
    assert versions(reader.snapshots.select_events(a)) == [1]
    with pytest.raises(IntegrityError):
        reader.events.insert_events([event(a, 1)])


@pytest.mark.parametrize("storage_backend", PERSISTENT_BACKENDS, indirect=True)
def test_concurrent_inserts_of_one_version_let_exactly_one_succeed(
    open_storage: Callable[[], EventStorage],
) -> None:
    storages = [open_storage(), open_storage()]
    rounds = 10
    outcomes: list[list[str]] = [[] for _ in range(rounds)]
    originators = [uuid4() for _ in range(rounds)]
    barrier = threading.Barrier(len(storages))

    def insert_each_round(storage: EventStorage) -> None:
        for number, originator_id in enumerate(originators):
            barrier.wait(timeout=30)
            try:
                storage.events.insert_events([event(originator_id, 1, topic=f"from-{id(storage)}")])
            except IntegrityError:
                outcomes[number].append("conflict")
            else:
                outcomes[number].append("inserted")

    threads = [threading.Thread(target=insert_each_round, args=(s,)) for s in storages]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)

    assert [sorted(outcome) for outcome in outcomes] == [["conflict", "inserted"]] * rounds
    assert len(storages[0].select_log(after=0, limit=100)) == rounds


def _insert_from_a_process(path: str, count: int, start: ProcessEvent) -> None:
    from runledger.infrastructure.storage.sqlite import SQLiteStorage

    storage = SQLiteStorage(path)
    try:
        start.wait(timeout=30)
        for _ in range(count):
            storage.events.insert_events([event(uuid4(), 1), event(uuid4(), 1)])
    finally:
        storage.close()


def test_several_processes_can_write_one_sqlite_file(sqlite_path: str) -> None:
    from runledger.infrastructure.storage.sqlite import SQLiteStorage

    context = multiprocessing.get_context("spawn")
    start = context.Event()
    count = 50
    processes = [
        context.Process(target=_insert_from_a_process, args=(sqlite_path, count, start))
        for _ in range(3)
    ]
    for process in processes:
        process.start()
    start.set()
    for process in processes:
        process.join(timeout=60)

    assert [p.exitcode for p in processes] == [0, 0, 0]
    storage = SQLiteStorage(sqlite_path)
    try:
        log = storage.select_log(after=0, limit=1000)
        assert ids(log) == list(range(1, 3 * count * 2 + 1))
    finally:
        storage.close()


@pytest.mark.postgres
def test_a_postgres_storage_keeps_to_its_own_schema(postgres_store_url: str) -> None:
    from runledger.infrastructure.storage.postgres import PostgresStorage

    in_public = PostgresStorage(postgres_store_url, pool_size=1)
    in_tenant = PostgresStorage(postgres_store_url, schema="tenant_a", pool_size=1)
    try:
        in_tenant.events.insert_events([event(uuid4(), 1)])

        assert in_tenant.max_position() == 1
        assert in_public.max_position() == 0
        again = PostgresStorage(postgres_store_url, schema="tenant_a", pool_size=1)
        try:
            assert again.max_position() == 1
        finally:
            again.close()
    finally:
        in_public.close()
        in_tenant.close()
