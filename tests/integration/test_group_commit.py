"""Group commit (DESIGN "Write path"): writer threads that insert while another commits share
the next transaction, each gets its own events' positions or its own error, and the group's
read models commit with it. On memory, a SQLite file and PostgreSQL.

Groups are made deterministic by holding the first writer inside its transaction (or at the
log's write lock) until the others have queued behind it.
"""

from __future__ import annotations

import contextlib
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any
from uuid import UUID, uuid4

import psycopg
from eventsourcing.persistence import IntegrityError, StoredEvent

from runledger.infrastructure.commits.group_commit import GroupCommit
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.storage.memory import MemoryStorage
from runledger.infrastructure.storage.postgres import PostgresStorage
from runledger.infrastructure.storage.sqlite import SQLiteStorage
from runledger.infrastructure.store import WorkflowStore
from tests.integration.test_same_commit_views import digests, queue_as_session
from tests.integration.test_storage_contract import event
from tests.support.writer_threads import WAIT_SECONDS, Writer, finish, start_in_line


def group_of(storage: EventStorage) -> GroupCommit:
    group = getattr(storage.events, "group", None)
    assert isinstance(group, GroupCommit)
    return group


def wait_until(condition: Callable[[], bool]) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


class Gate:
    """A read-model step that keeps its writer inside the transaction until released, and
    writes nothing itself."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()
        self.settled: list[bool] = []

    def _hold(self) -> None:
        if not self.entered.is_set():
            self.entered.set()
            assert self.release.wait(WAIT_SECONDS)

    def catch_up(self) -> None:
        pass

    def next_position(self) -> int | None:
        self._hold()
        return None

    def prepare(self, stored_events: Sequence[StoredEvent], positions: Sequence[int]) -> bool:
        del stored_events, positions
        self._hold()
        return False

    def write(self, cursor: Any) -> bool:
        del cursor
        return False

    def settle(self, written: bool) -> None:
        self.settled.append(written)


def writer(storage: EventStorage, batch: Sequence[StoredEvent], step: Any = None) -> Writer:
    """A thread inserting ``batch`` into the storage's log."""

    def insert(events: Sequence[StoredEvent], same_commit: Any) -> Sequence[int] | None:
        return storage.events.insert_events(events, same_commit=same_commit)

    return Writer(insert, batch, step)


def queue_behind_a_held_leader(
    storage: EventStorage, batches: Sequence[Sequence[StoredEvent]]
) -> tuple[Writer, list[Writer]]:
    """A leader held inside its transaction, then one writer per batch queued behind it in
    order; all released and finished when this returns."""
    group = group_of(storage)
    gate = Gate()
    leader = writer(storage, [event(uuid4(), 1)], gate)
    leader.start()
    assert gate.entered.wait(WAIT_SECONDS)
    writers = [writer(storage, batch) for batch in batches]
    start_in_line(writers, lambda: group.queued, ahead=1)
    gate.release.set()
    finish(leader, *writers)
    assert leader.error is None
    assert gate.settled == [False]
    return leader, writers


def logged(storage: EventStorage) -> dict[int, tuple[UUID, int]]:
    return {
        n.id: (UUID(str(n.originator_id)), n.originator_version)
        for n in storage.select_log(after=0, limit=1000)
    }


def test_writers_queued_behind_a_commit_share_the_next_one(storage: EventStorage) -> None:
    stats = storage.stats
    batches = [[event(uuid4(), 1), event(uuid4(), 1)] for _ in range(5)]

    leader, writers = queue_behind_a_held_leader(storage, batches)

    assert (stats.batches, stats.requests) == (2, 6)
    assert [w.error for w in writers] == [None] * 5
    # Each writer has its own events' positions, in the order of its batch.
    log = logged(storage)
    for writer in writers:
        assert writer.positions is not None
        assert [log[p] for p in writer.positions] == [
            (s.originator_id, s.originator_version) for s in writer.batch
        ]
    assert leader.positions is not None
    everyone = leader.positions + [p for w in writers for p in w.positions or []]
    assert sorted(everyone) == sorted(log)
    assert len(log) == 11


def test_a_conflict_in_a_group_fails_only_its_own_writer(storage: EventStorage) -> None:
    taken = uuid4()
    storage.events.insert_events([event(taken, 1)])
    stats = storage.stats
    before = stats.batches
    first, stale, last = [event(uuid4(), 1)], [event(taken, 1)], [event(uuid4(), 1)]

    leader, writers = queue_behind_a_held_leader(storage, [first, stale, last])

    assert writers[0].error is None
    assert isinstance(writers[1].error, IntegrityError)
    assert writers[2].error is None
    # The leader alone, the failed group (nothing committed), then each writer alone.
    assert stats.batches - before == 4
    expected = [event(taken, 1), *leader.batch, *first, *last]
    assert sorted(logged(storage).values()) == sorted(
        (s.originator_id, s.originator_version) for s in expected
    )


def test_writers_of_one_aggregate_do_not_share_a_group(storage: EventStorage) -> None:
    shared, other = uuid4(), uuid4()
    stats = storage.stats

    _, writers = queue_behind_a_held_leader(
        storage, [[event(shared, 1)], [event(shared, 2)], [event(other, 1)]]
    )

    assert [w.error for w in writers] == [None, None, None]
    # The leader; the first of the aggregate alone; its second with the writer behind it.
    assert stats.batches == 3
    assert [s.originator_version for s in storage.events.select_events(shared)] == [1, 2]


def test_a_group_is_no_bigger_than_its_event_limit(storage: EventStorage) -> None:
    stats = storage.stats
    wide = [[event(uuid4(), 1) for _ in range(40)] for _ in range(2)]

    _, writers = queue_behind_a_held_leader(storage, [*wide, [event(uuid4(), 1)]])

    assert [w.error for w in writers] == [None, None, None]
    # 40 + 40 events exceed the group's 64: the second wide batch starts the next group.
    assert stats.batches == 3
    assert len(logged(storage)) == 82


# -- through the store: the group's read models commit with it ----------------------------


@contextlib.contextmanager
def log_write_lock_held(runtime: StoreRuntime) -> Iterator[None]:
    """Hold the log's write lock from outside the store, as another writer would."""
    storage = runtime.storage
    if isinstance(storage, MemoryStorage):
        # The memory log's one lock is its transaction.
        with storage.events._lock:
            yield
    elif isinstance(storage, SQLiteStorage):
        other = sqlite3.connect(storage.path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")
            other.close()
    else:
        assert isinstance(storage, PostgresStorage)
        key = storage.events.writer_lock_key
        with psycopg.connect(runtime.url, autocommit=True) as session:
            session.execute("SELECT pg_advisory_lock(%s)", (key,))
            try:
                yield
            finally:
                session.execute("SELECT pg_advisory_unlock(%s)", (key,))


def follow_up_ids_of(store: WorkflowStore, run_id: str) -> list[str]:
    queue = store.follow_up_queue(run_id)
    assert queue is not None
    return [f.follow_up_id for f in queue.follow_ups]


def test_a_group_of_commands_writes_their_read_models_in_its_commit(
    runtime: StoreRuntime, store: WorkflowStore
) -> None:
    writers = 6
    for number in range(writers):
        store.create_run(f"run-{number}", workflow_name="echo", input={})
        store.bind_origin_session(f"run-{number}", "session-1")
    group = group_of(runtime.storage)
    stats = runtime.stats
    commits, written = stats.batches, stats.read_models_with_events
    queued: dict[str, str] = {}

    def command(number: int) -> None:
        queued[f"run-{number}"] = queue_as_session(store, f"run-{number}", f"request-{number}")

    threads = [threading.Thread(target=command, args=(n,), daemon=True) for n in range(writers)]
    with log_write_lock_held(runtime):
        for thread in threads:
            thread.start()
        wait_until(lambda: group.queued == writers)
    for thread in threads:
        thread.join(WAIT_SECONDS)
        assert not thread.is_alive()

    # The first command waited for the lock alone; the five behind it committed as one, and
    # both commits carried their read models.
    assert stats.batches - commits == 2
    assert stats.read_models_with_events - written == 2
    # Nothing was left to catch up: the queries read what the commits wrote.
    assert runtime.projector.next_position() == runtime.storage.max_position() + 1
    for run_id, follow_up_id in queued.items():
        assert follow_up_ids_of(store, run_id) == [follow_up_id]
    with_commands = digests(runtime)
    runtime.rebuild_projections()
    assert digests(runtime) == with_commands


def test_many_writer_threads_lose_no_acknowledged_command(
    runtime: StoreRuntime, store: WorkflowStore
) -> None:
    writers, each = 4, 15
    for number in range(writers):
        store.create_run(f"run-{number}", workflow_name="echo", input={})
        store.bind_origin_session(f"run-{number}", "session-1")
    acknowledged: dict[str, list[str]] = {f"run-{n}": [] for n in range(writers)}
    errors: list[BaseException] = []

    def command(number: int) -> None:
        run_id = f"run-{number}"
        try:
            for index in range(each):
                acknowledged[run_id].append(queue_as_session(store, run_id, f"request-{index}"))
                # Every fourth command on the first run too: writers meet on one aggregate.
                if index % 4 == 0:
                    queue_as_session(store, "run-0", f"shared-{number}-{index}")
        except BaseException as error:
            errors.append(error)

    threads = [threading.Thread(target=command, args=(n,), daemon=True) for n in range(writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive()

    assert errors == []
    for run_id, follow_up_ids in acknowledged.items():
        assert set(follow_up_ids) <= set(follow_up_ids_of(store, run_id))
    assert len(follow_up_ids_of(store, "run-0")) == each + writers * len(range(0, each, 4))
    with_commands = digests(runtime)
    runtime.rebuild_projections()
    assert digests(runtime) == with_commands
