"""PostgreSQL writers take no table lock; followers never skip an event, writers never deadlock.

Writers draw positions and commit concurrently, so positions become visible out of order and
rolled-back inserts leave holes. ``read_log`` must stop at a hole while any transaction that
may fill it is open, and pass it only once it is certain to stay empty; ``event_log`` and the
library's notification log must never page past such a hole either. And two writers saving
overlapping aggregates in opposite orders must queue rather than deadlock.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from eventsourcing.persistence import StoredEvent

from runledger.domain.application import WorkflowRuns
from runledger.domain.ports import CommandUnit
from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.values import HOST
from runledger.infrastructure.commits.mapper import LedgerMapper
from runledger.infrastructure.commits.wiring import StorageWiring
from runledger.infrastructure.event_log import EventLog
from runledger.infrastructure.storage.base import index_columns
from runledger.infrastructure.storage.postgres import (
    MAX_AGGREGATE_LOCKS,
    PostgresStorage,
    writer_lock_key,
)

pytestmark = pytest.mark.postgres

INSERT = (
    "INSERT INTO runledger_events (originator_id, originator_version, topic, state) "
    "VALUES (%s, 1, 'run.created', '{}'::bytea) RETURNING position"
)


@pytest.fixture
def storage(postgres_store_url: str) -> Iterator[PostgresStorage]:
    opened = PostgresStorage(postgres_store_url)
    try:
        yield opened
    finally:
        opened.close()


WRITER_LOCK = writer_lock_key("public.runledger_events")


class Writer:
    """A transaction that inserts like the recorder does: registered as a writer first."""

    def __init__(self, url: str) -> None:
        self.connection = psycopg.connect(url)
        self.connection.execute("SELECT pg_advisory_xact_lock_shared(%s)", (WRITER_LOCK,))

    def insert(self) -> int:
        row = self.connection.execute(INSERT, (uuid.uuid4(),)).fetchone()
        assert row is not None
        position: int = row[0]
        return position

    def commit(self) -> None:
        self.connection.commit()
        self.connection.close()

    def roll_back(self) -> None:
        self.connection.rollback()
        self.connection.close()


def committed(url: str) -> int:
    writer = Writer(url)
    position = writer.insert()
    writer.commit()
    return position


def positions(storage: PostgresStorage, after: int = 0) -> list[int]:
    return [entry.position for entry in storage.read_log(after=after, limit=1000)]


def test_a_follower_stops_before_a_position_an_open_transaction_holds(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    first = committed(postgres_store_url)
    holder = Writer(postgres_store_url)
    held = holder.insert()
    later = committed(postgres_store_url)
    assert positions(storage) == [first], "read past a position an open transaction holds"
    holder.commit()
    assert positions(storage) == [first, held, later]


def test_a_long_open_transaction_is_waited_for_however_long_it_stays_open(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    holder = Writer(postgres_store_url)
    held = holder.insert()
    later = committed(postgres_store_url)
    deadline = time.monotonic() + 1.5
    while time.monotonic() < deadline:
        assert positions(storage) == [], "skipped a position of a transaction still open"
        time.sleep(0.1)
    holder.commit()
    assert positions(storage) == [held, later]


def test_a_hole_the_caller_knows_settled_is_passed_while_other_writers_are_open(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    # A process's tracking at a position says nothing at or below it can still be filled
    # (``read_log``'s ``settled_through``): a replay up to there must not stop at a hole.
    loser = Writer(postgres_store_url)
    hole = loser.insert()
    loser.roll_back()
    later = committed(postgres_store_url)
    open_writer = Writer(postgres_store_url)
    try:
        # Met while a writer is open, the hole holds a plain read back...
        assert positions(storage) == []
        entries = storage.read_log(after=0, limit=1000, settled_through=later)
        assert [entry.position for entry in entries] == [later]
        # ...and a hole above what the caller knows settled still does.
        beyond = Writer(postgres_store_url)
        held = beyond.insert()
        last = committed(postgres_store_url)
        entries = storage.read_log(after=0, limit=1000, settled_through=later)
        assert [entry.position for entry in entries] == [later]
        beyond.commit()
        assert [e.position for e in storage.read_log(after=later, limit=1000)] == [held, last]
    finally:
        open_writer.roll_back()
    assert hole < later


def test_a_rolled_back_insert_leaves_a_hole_the_follower_passes(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    loser = Writer(postgres_store_url)
    hole = loser.insert()
    later = committed(postgres_store_url)
    assert positions(storage) == []
    loser.roll_back()
    seen: list[int] = []
    deadline = time.monotonic() + 2.0
    while not seen and time.monotonic() < deadline:
        seen = positions(storage)
    assert seen == [later]
    assert hole < later


def test_an_interior_hole_between_committed_events_is_passed_once_settled(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    first = committed(postgres_store_url)
    loser = Writer(postgres_store_url)
    loser.insert()
    loser.roll_back()
    last = committed(postgres_store_url)
    seen = positions(storage)
    if seen == [first]:
        seen = seen + positions(storage, after=first)
    assert seen == [first, last]


def test_an_unrelated_long_transaction_does_not_hold_the_follower_back(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    with psycopg.connect(postgres_store_url) as bystander:
        bystander.execute("CREATE TABLE bystander (x int)")
        bystander.execute("INSERT INTO bystander VALUES (1)")  # holds a transaction id
        loser = Writer(postgres_store_url)
        loser.insert()
        loser.roll_back()
        later = committed(postgres_store_url)
        seen: list[int] = []
        deadline = time.monotonic() + 2.0
        while not seen and time.monotonic() < deadline:
            seen = positions(storage)
        assert seen == [later], "an open transaction that writes no events stalled the follower"
        bystander.rollback()


def test_concurrent_writers_with_rollbacks_lose_nothing_for_a_follower(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    committed_positions: list[int] = []
    lock = threading.Lock()
    stop = threading.Event()

    def write(seed: int) -> None:
        chooser = random.Random(seed)
        while not stop.is_set():
            writer = Writer(postgres_store_url)
            drawn = [writer.insert() for _ in range(chooser.randint(1, 3))]
            time.sleep(chooser.random() * 0.003)
            if chooser.random() < 0.2:
                writer.roll_back()
            else:
                writer.commit()
                with lock:
                    committed_positions.extend(drawn)

    threads = [threading.Thread(target=write, args=(seed,)) for seed in range(4)]
    for thread in threads:
        thread.start()
    followed: list[int] = []
    started = time.monotonic()
    try:
        while time.monotonic() - started < 3.0:
            followed.extend(positions(storage, after=followed[-1] if followed else 0))
    finally:
        stop.set()
        for thread in threads:
            thread.join(timeout=10)
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline:
        followed.extend(positions(storage, after=followed[-1] if followed else 0))
        if len(followed) >= len(committed_positions):
            break
    assert followed == sorted(committed_positions), "the follower skipped or repeated events"
    assert len(committed_positions) > 100, "the writers barely wrote; the race was not exercised"


# -- event_log and the library's notification log page as safely as the follower ----------

INSERT_STORED = (
    "INSERT INTO runledger_events "
    "(originator_id, originator_version, topic, state, run_id, lookup_key) "
    "VALUES (%s, %s, %s, %s, %s, %s) RETURNING position"
)
LOG_WRITERS = 10


def created_events(count: int) -> list[StoredEvent]:
    """Stored ``run.created`` events of new runs, exactly as the application maps them."""
    mapper = LedgerMapper()
    now = datetime(2025, 1, 1, tzinfo=UTC)
    stored: list[StoredEvent] = []
    for _ in range(count):
        run = Run.create(
            f"run-{uuid.uuid4()}",
            workflow_name="gaps",
            input={},
            workflow_ref=None,
            title=None,
            status="running",
            parent=None,
            lineage_kind=None,
            parent_terminal_fingerprint=None,
            actor=HOST,
            now=now,
        )
        stored.extend(mapper.to_stored_event(event) for event in run.collect_events())
    return stored


def insert_stored(connection: psycopg.Connection[tuple[object, ...]], event: StoredEvent) -> int:
    row = connection.execute(
        INSERT_STORED,
        (
            event.originator_id,
            event.originator_version,
            event.topic,
            event.state,
            *index_columns(event),
        ),
    ).fetchone()
    assert row is not None
    position = row[0]
    assert isinstance(position, int)
    return position


def test_event_log_stops_before_a_position_an_open_transaction_holds(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    app = WorkflowRuns(StorageWiring(storage))
    log = EventLog(storage, app.mapper)
    first, held, later = created_events(3)
    with psycopg.connect(postgres_store_url, autocommit=True) as committer:
        first_position = insert_stored(committer, first)
        holder = Writer(postgres_store_url)
        held_position = insert_stored(holder.connection, held)
        later_position = insert_stored(committer, later)
    later_run = index_columns(later)[0]

    assert [e.position for e in log.event_log()] == [first_position]
    assert log.event_log(run_id=later_run) == [], "a run's page passed an open position"
    holder.commit()
    assert [e.position for e in log.event_log()] == [
        first_position,
        held_position,
        later_position,
    ]
    assert [e.position for e in log.event_log(run_id=later_run)] == [later_position]


def write_with_rollbacks(
    url: str, seed: int, events: list[StoredEvent], stop: threading.Event, committed: list[int]
) -> None:
    """Like the recorder: writer lock, then inserts; open a moment; one in five rolls back."""
    chooser = random.Random(seed)
    with psycopg.connect(url) as connection:
        while events and not stop.is_set():
            connection.execute("SELECT pg_advisory_xact_lock_shared(%s)", (WRITER_LOCK,))
            drawn = []
            for _ in range(min(len(events), chooser.randint(1, 3))):
                drawn.append(insert_stored(connection, events.pop()))
            time.sleep(chooser.random() * 0.003)
            if chooser.random() < 0.2:
                connection.rollback()
            else:
                connection.commit()
                committed.extend(drawn)


def follow(page: Callable[[int], list[int]], until: threading.Event) -> list[int]:
    """Positions read by paging after the last one seen, until ``until`` and a final drain."""
    seen: list[int] = []
    drained = False
    while not drained:
        drained = until.is_set()
        while batch := page(seen[-1] if seen else 0):
            seen.extend(batch)
    return seen


def test_event_log_paging_under_concurrent_writers_sees_every_committed_event_once_in_order(
    storage: PostgresStorage, postgres_store_url: str
) -> None:
    app = WorkflowRuns(StorageWiring(storage))
    log = EventLog(storage, app.mapper)
    readers: dict[str, Callable[[int], list[int]]] = {
        "read_log": lambda after: [e.position for e in storage.read_log(after=after, limit=50)],
        "event_log": lambda after: [e.position for e in log.event_log(after=after, limit=50)],
        "notification_log": lambda after: [
            n.id for n in app.notification_log.select(start=after + 1, limit=10)
        ],
    }
    committed: list[int] = []
    stop = threading.Event()
    writers_done = threading.Event()
    writers = [
        threading.Thread(
            target=write_with_rollbacks,
            args=(postgres_store_url, seed, created_events(300), stop, committed),
        )
        for seed in range(LOG_WRITERS)
    ]
    followed: dict[str, list[int]] = {}
    followers = [
        threading.Thread(
            target=lambda n=name, r=reader: followed.update({n: follow(r, writers_done)})
        )
        for name, reader in readers.items()
    ]
    for thread in [*writers, *followers]:
        thread.start()
    time.sleep(3.0)
    stop.set()
    for thread in writers:
        thread.join(timeout=30)
    writers_done.set()
    for thread in followers:
        thread.join(timeout=60)

    assert len(committed) > 500, "the writers barely wrote; the race was not exercised"
    expected = sorted(committed)
    for name in readers:
        assert followed[name] == expected, f"{name} skipped or repeated committed events"


# -- opposite save orders queue instead of deadlocking ------------------------------------

RUNS = [f"run-{number:02d}" for number in range(20)]
ROUNDS = 30


def deadlocks(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    assert row is not None
    count: int = row[0]
    return count


def toggle_all(run_ids: list[str]) -> Callable[[CommandUnit], None]:
    """One command pausing (or resuming) every run, saved in the order given."""

    def command(unit: CommandUnit) -> None:
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
    setup = WorkflowRuns(StorageWiring(storage))
    for run_id in RUNS:
        setup.create_run(run_id, workflow_name="order", input={})
    before = deadlocks(postgres_store_url)
    barrier = threading.Barrier(2)
    errors: list[BaseException] = []

    def race(run_ids: list[str]) -> None:
        app = WorkflowRuns(StorageWiring(storage))
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
    reread_storage = PostgresStorage(postgres_store_url)
    versions = {
        run_id: len(reread_storage.events.select_events(run_aggregate_id(run_id)))
        for run_id in RUNS
    }
    assert versions == dict.fromkeys(RUNS, 1 + 2 * ROUNDS), "a change was lost or doubled"
    reread_storage.close()


def test_a_batch_wider_than_the_lock_cap_writes_alone_and_is_followed(
    storage: PostgresStorage,
) -> None:
    wide = created_events(MAX_AGGREGATE_LOCKS * 3)

    positions = storage.events.insert_events(wide)

    assert positions is not None
    assert [e.position for e in storage.read_log(after=0, limit=1000)] == list(positions)
