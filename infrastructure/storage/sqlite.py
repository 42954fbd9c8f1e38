"""Event storage in one SQLite file (WAL), shareable by several processes on one machine."""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any, Final
from uuid import UUID

import orjson
from eventsourcing.persistence import IntegrityError, InterfaceError, Notification, StoredEvent
from eventsourcing.persistence import OperationalError as PersistenceOperationalError
from eventsourcing.sqlite import (
    SQLITE3_DEFAULT_LOCK_TIMEOUT,
    SQLiteAggregateRecorder,
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteCursor,
    SQLiteDatastore,
)

from runledger.domain.errors import StorageUnavailableError
from runledger.domain.ports import LogEntry
from runledger.infrastructure.commits.group_commit import GroupCommit
from runledger.infrastructure.commits.ports import ArchivedAggregateError, Fence, SameCommit
from runledger.infrastructure.databases import create_private_file
from runledger.infrastructure.storage.archived import (
    ARCHIVED_MESSAGE,
    ARCHIVED_TABLE,
    CREATED_TOPIC,
    TOMBSTONE_TOPICS,
    GuardMovedError,
    TreeChangedError,
    TreeRemoval,
    TreeRestoral,
    ViewsMovedError,
    ViewsWrite,
    created_in_tree,
    fenced_ids,
    same_tree,
)
from runledger.infrastructure.storage.base import (
    EVENTS_TABLE,
    LOG_COLUMNS,
    SNAPSHOTS_TABLE,
    FenceBrokenError,
    LogCondition,
    RecorderBackedStorage,
    SqlLogQueries,
    UuidOriginatorIds,
    as_uuid,
    fence_conditions,
    index_columns,
    index_fences,
)
from runledger.infrastructure.storage.file_locks import AggregateHeldError, AggregateLocks
from runledger.infrastructure.storage.log_probes import LogProbe

logger = logging.getLogger(__name__)

LOCK_TIMEOUT_SECONDS = 5
"""How long a writer waits for another connection's (or process's) write lock."""

STATEMENT_CACHE_SIZE = 256
"""Prepared statements kept per connection: every statement one command runs, with room."""


class StatementCachingPool(SQLiteConnectionPool):
    """The library's pool, with connections that keep their prepared statements.

    The library connects with ``cached_statements=True``, a cache of one statement, so a
    command's dozen statements (events, view rows, tracking) would each be parsed and planned
    again on every command; parsing and planning is a large share of a small command.
    """

    def _create_connection(self) -> SQLiteConnection:
        try:
            connection = sqlite3.connect(
                database=self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,  # The library's transactions issue BEGIN themselves.
                cached_statements=STATEMENT_CACHE_SIZE,
                timeout=self.lock_timeout or SQLITE3_DEFAULT_LOCK_TIMEOUT,
            )
        except (sqlite3.Error, TypeError) as error:
            raise InterfaceError(error) from error
        if not self.is_sqlite_memory_mode and not self.is_journal_mode_wal:
            if connection.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                connection.execute("PRAGMA journal_mode=WAL")
                self.journal_mode_was_changed_to_wal = True
            self.is_journal_mode_wal = True
        # Events are durable at commit: each commit syncs the log (SQLite's default, said here
        # so that no build's or library's default can weaken it).
        connection.execute("PRAGMA synchronous=FULL")
        # A command writes its read models behind a savepoint, whose sub-journal SQLite keeps
        # in a temporary file by default: in memory it costs no file system calls.
        connection.execute("PRAGMA temp_store=MEMORY")
        connection.row_factory = sqlite3.Row
        return SQLiteConnection(sqlite_conn=connection, max_age=self.max_age)


def statement_caching_datastore(path: str, *, lock_timeout: int, pool_size: int) -> SQLiteDatastore:
    """The library's datastore on ``path`` whose connections keep their statements."""
    datastore = SQLiteDatastore(
        path, lock_timeout=lock_timeout, pool_size=pool_size, originator_id_type="uuid"
    )
    # Nothing has connected yet: the library's pool holds no connection to close.
    datastore.pool = StatementCachingPool(
        db_name=path, lock_timeout=lock_timeout, pool_size=pool_size
    )
    return datastore


class SQLiteEventRecorder(SqlLogQueries, SQLiteApplicationRecorder):
    """The event log; ``position`` is the rowid, so positions follow commit order."""

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = EVENTS_TABLE):
        super().__init__(datastore, events_table_name)
        self.aggregate_locks: AggregateLocks | None = None
        """The storage's locks, whose holders that go first a save gives way to."""
        table = self.events_table_name
        self.insert_events_statement = (
            f"INSERT INTO {table} "
            "(originator_id, originator_version, topic, state, run_id, lookup_key) "
            "VALUES (?, ?, ?, ?, ?, ?)"
        )
        self.select_max_notification_id_statement = f"SELECT MAX(position) FROM {table}"
        self._select_columns = (
            f"SELECT position, originator_id, originator_version, topic, state FROM {table} "
        )
        self._broken_fence_statement = (
            f"SELECT 1 FROM {table} WHERE originator_id = ? AND originator_version > ? "
            "AND topic = ? LIMIT 1"
        )
        # Completed with the seen ids' placeholders (SQLite takes an empty list).
        self._unseen_in_index_statement = (
            f"SELECT 1 FROM {table} WHERE lookup_key = ? AND originator_id NOT IN "
        )
        self.group = GroupCommit(self._write)

    def construct_create_table_statements(self) -> list[str]:
        table = self.events_table_name
        return [
            f"CREATE TABLE IF NOT EXISTS {table} ("
            "position INTEGER PRIMARY KEY, "
            "originator_id TEXT NOT NULL, "
            "originator_version INTEGER NOT NULL, "
            "topic TEXT NOT NULL, "
            "state BLOB NOT NULL, "
            "run_id TEXT, "
            "lookup_key TEXT, "
            "UNIQUE (originator_id, originator_version))",
            f"CREATE INDEX IF NOT EXISTS {table}_run_id_position_idx "
            f"ON {table} (run_id, position) WHERE run_id IS NOT NULL",
            f"CREATE INDEX IF NOT EXISTS {table}_lookup_key_idx "
            f"ON {table} (lookup_key) WHERE lookup_key IS NOT NULL",
            # The archived-ids guard (``storage.archived``): ids as the events store them.
            f"CREATE TABLE IF NOT EXISTS {ARCHIVED_TABLE} ("
            "aggregate_id TEXT PRIMARY KEY, archive_id TEXT NOT NULL) WITHOUT ROWID",
            f"CREATE TRIGGER IF NOT EXISTS {table}_archived_guard BEFORE INSERT ON {table} "
            f"WHEN EXISTS (SELECT 1 FROM {ARCHIVED_TABLE} "
            "WHERE aggregate_id = NEW.originator_id) "
            f"BEGIN SELECT RAISE(ABORT, '{ARCHIVED_MESSAGE}'); END",
        ]

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        same_commit: SameCommit | None = None,
        fences: Sequence[Fence] = (),
        **kwargs: Any,
    ) -> Sequence[int] | None:
        if not stored_events:
            return []
        if kwargs:
            # Nothing here passes more (the library's tracking records, say): not grouped.
            return super().insert_events(stored_events, **kwargs)
        if self.aggregate_locks is not None:
            try:
                self.aggregate_locks.give_way([as_uuid(s.originator_id) for s in stored_events])
            except AggregateHeldError:
                # As a version taken: the command runs again, and waits for its turn.
                raise IntegrityError("a writer that goes first holds an aggregate") from None
        return self.group.insert(stored_events, same_commit, fences)

    def _write(
        self,
        stored_events: Sequence[StoredEvent],
        same_commit: SameCommit | None,
        fences: Sequence[Fence] = (),
    ) -> list[int]:
        """One transaction for the batch, with the step's read models (``GroupCommit``)."""
        try:
            return self._write_once(stored_events, same_commit, fences)
        except IntegrityError as error:
            if ARCHIVED_MESSAGE in str(error):
                raise ArchivedAggregateError(str(error)) from error
            raise
        except PersistenceOperationalError as error:
            if "locked" not in str(error):
                raise
            # Another connection held the file's write lock past the busy timeout: the store
            # cannot serve the command now (retryable, exit 3), nothing was written.
            raise StorageUnavailableError(
                "the file's write lock was held by another writer too long",
                self.datastore.pool.db_name,
                str(error),
            ) from error

    def _write_once(
        self,
        stored_events: Sequence[StoredEvent],
        same_commit: SameCommit | None,
        fences: Sequence[Fence],
    ) -> list[int]:
        if same_commit is None:
            with self.datastore.transaction(commit=True) as c:
                positions = self._insert_events(c, stored_events)
                self._check_fences(c, fences)
                return positions
        written = False
        try:
            with self.datastore.transaction(commit=True) as c:
                positions = self._insert_events(c, stored_events)
                self._check_fences(c, fences)
                # Rowids drawn under the write lock: contiguous, and every position before
                # them is committed, so the step may project them as the log's next ones.
                written = _write_step(c, same_commit, stored_events, positions)
        except BaseException:
            same_commit.settle(False)
            raise
        same_commit.settle(written)
        return positions

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **_: Any
    ) -> list[int]:
        rows = []
        for s in stored_events:
            run_id, lookup_key = index_columns(s)
            rows.append(
                (
                    as_uuid(s.originator_id).hex,
                    s.originator_version,
                    s.topic,
                    s.state,
                    run_id,
                    lookup_key,
                )
            )
        if len(rows) == 1:
            # Most commands save one event: its rowid comes with the insert, which
            # ``executemany`` leaves unset (one statement fewer per command).
            c.execute(self.insert_events_statement, rows[0])
            position: int = c.lastrowid
            return [position]
        # One statement for the batch; in one write transaction its rowids are contiguous.
        c.executemany(self.insert_events_statement, rows)
        c.execute("SELECT last_insert_rowid()")
        last: int = c.fetchone()[0]
        return list(range(last - len(rows) + 1, last + 1))

    def _check_fences(self, c: SQLiteCursor, fences: Sequence[Fence]) -> None:
        """Refuse the insert (rolled back) if a fence is broken. Checked after the insert,
        which took the file's write lock: no other commit can come between the check and
        this one's, and a claim in the batch itself is seen too."""
        if fences:
            fenced = orjson.dumps([i.hex for i in fenced_ids(fences)]).decode()
            c.execute(
                f"SELECT 1 FROM {ARCHIVED_TABLE} "
                "WHERE aggregate_id IN (SELECT value FROM json_each(?)) LIMIT 1",
                (fenced,),
            )
            if c.fetchone() is not None:
                raise ArchivedAggregateError(ARCHIVED_MESSAGE)
        for condition in fence_conditions(fences):
            aggregate_id, version, topic = condition
            c.execute(self._broken_fence_statement, (aggregate_id.hex, version, topic))
            if c.fetchone() is not None:
                raise FenceBrokenError.of(condition)
        for fence in index_fences(fences):
            seen = [aggregate_id.hex for aggregate_id in fence.seen]
            c.execute(
                self._unseen_in_index_statement + f"({', '.join('?' * len(seen))}) LIMIT 1",
                (fence.lookup_key, *seen),
            )
            if c.fetchone() is not None:
                raise FenceBrokenError.of_index(fence)

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Originators with an event under ``lookup_key``, by first position."""
        statement = (
            "SELECT originator_id, MIN(position) AS first_position "
            f"FROM {self.events_table_name} WHERE lookup_key = ? "
            "GROUP BY originator_id ORDER BY first_position"
        )
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, (lookup_key,))
            return [UUID(row["originator_id"]) for row in c.fetchall()]

    def _select(self, conditions: Sequence[LogCondition], limit: int) -> list[Notification]:
        clauses: list[str] = []
        params: list[Any] = []
        for column, operator, value in conditions:
            if operator == "in":
                clauses.append(f"{column} IN ({', '.join('?' * len(value))})")
                params.extend(value)
            else:
                clauses.append(f"{column} {operator} ?")
                params.append(value)
        statement = self._select_columns
        if clauses:
            statement += "WHERE " + " AND ".join(clauses) + " "
        statement += "ORDER BY position LIMIT ?"
        with self.datastore.transaction(commit=False) as c:
            c.execute(statement, [*params, limit])
            return [
                Notification(
                    id=row["position"],
                    originator_id=UUID(row["originator_id"]),
                    originator_version=row["originator_version"],
                    topic=row["topic"],
                    state=row["state"],
                )
                for row in c.fetchall()
            ]


SAME_COMMIT_SAVEPOINT: Final = "runledger_same_commit"


def _write_step(
    c: Any, step: SameCommit, stored_events: Sequence[StoredEvent], positions: Sequence[int]
) -> bool:
    """The step's writes behind a savepoint: an error in them costs the views, not the events."""
    if not step.prepare(stored_events, positions):
        return False
    c.execute(f"SAVEPOINT {SAME_COMMIT_SAVEPOINT}")
    try:
        written = step.write(c)
    except sqlite3.Error:
        logger.exception("read models not written with the events; they catch up from the log")
        written = False
    if not written:
        # A projection that moved meanwhile may have left some slots moved by this step.
        c.execute(f"ROLLBACK TO {SAME_COMMIT_SAVEPOINT}")
    c.execute(f"RELEASE {SAME_COMMIT_SAVEPOINT}")
    return written


class SQLiteSnapshotRecorder(UuidOriginatorIds, SQLiteAggregateRecorder):
    """Snapshots keyed by (originator_id, originator_version), ids stored as hex."""

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = SNAPSHOTS_TABLE):
        super().__init__(datastore, events_table_name)

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        normalised = [
            StoredEvent(
                originator_id=as_uuid(s.originator_id),
                originator_version=s.originator_version,
                topic=s.topic,
                state=s.state,
            )
            for s in stored_events
        ]
        return super()._insert_events(c, normalised, **kwargs)


def _while_locked(action: Callable[[], None], *, timeout: float) -> None:
    """Run ``action``, again while another process holds the new file's lock.

    Two processes opening a new file at once race on ``PRAGMA journal_mode=WAL``, which
    SQLite answers "database is locked" without waiting for its busy timeout.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            action()
        except (sqlite3.OperationalError, PersistenceOperationalError) as error:
            if "locked" not in str(error) or time.monotonic() >= deadline:
                raise
            time.sleep(0.02)
        else:
            return


class SQLiteStorage(RecorderBackedStorage[SQLiteEventRecorder, SQLiteSnapshotRecorder]):
    """Event log and snapshots in the SQLite file at ``path``; tables made on first use."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        lock_timeout: int = LOCK_TIMEOUT_SECONDS,
        pool_size: int = 5,
    ) -> None:
        self.path = os.fspath(path)
        create_private_file(self.path)
        self.datastore = statement_caching_datastore(
            self.path, lock_timeout=lock_timeout, pool_size=pool_size
        )
        super().__init__(
            SQLiteEventRecorder(self.datastore), SQLiteSnapshotRecorder(self.datastore)
        )
        shared = self.path not in ("", ":memory:") and not self.path.startswith("file:")
        self._aggregate_locks = AggregateLocks(f"{self.path}-locks" if shared else None)
        self._events.aggregate_locks = self._aggregate_locks
        _while_locked(self._events.create_table, timeout=lock_timeout)
        _while_locked(self._snapshots.create_table, timeout=lock_timeout)
        self._read_log_statement = (
            f"SELECT {LOG_COLUMNS} FROM {self._events.events_table_name} "
            "WHERE position > ? ORDER BY position LIMIT ?"
        )
        self._probe_statement = (
            f"SELECT 1 WHERE (SELECT max(position) FROM {self._events.events_table_name}) > ?"
        )

    def lock_aggregates(
        self, aggregate_ids: Sequence[UUID], *, conflicted: bool = True, first: bool = False
    ) -> AbstractContextManager[None]:
        """Hold these aggregates against the other commands holding them, in every process on
        this file (``file_locks``): SQLite's writer lock serialises commits, but not a
        command's reads with its insert. Only once the command itself conflicted: holding
        merely hot aggregates would run the reads and logic of every process in turn, one
        process at a time, while a first attempt that loses just runs again. Other saves
        give way to a holder that goes ``first`` (``AggregateLocks.give_way``)."""
        return self._aggregate_locks.holding(aggregate_ids if conflicted else (), first=first)

    def log_probe(self, after: int) -> LogProbe:
        """Whether the log holds an event past ``after`` (writers take turns on the file, so
        none lies behind a gap): the views' connection, on the same file, runs it after a
        query's first read (``SQLiteViewStore``)."""
        return LogProbe(after, self._probe_statement, (after,))

    def read_log(self, *, after: int, limit: int, settled_through: int = 0) -> list[LogEntry]:
        """The next stored events after ``after``, as lean tuples (ids stay hex text;
        writers take turns on the file, so no position is ever filled out of order)."""
        del settled_through
        with self.datastore.transaction(commit=False) as c:
            cursor = c.sqlite_cursor
            # Plain tuples, made into entries in C: the connection's sqlite3.Row rows cost
            # a replay a tenth of its read (every event of the log, on every rebuild).
            cursor.row_factory = None
            cursor.execute(self._read_log_statement, (after, limit))
            return list(map(LogEntry._make, cursor.fetchall()))

    def remove_tree(self, removal: TreeRemoval, write_views: ViewsWrite) -> int:
        """Remove a pruned tree in one transaction (``storage.archived``); returns the
        tombstone's position. The tombstone's insert comes first: it takes the file's write
        lock, so the checks read what the deletes delete, and its rowid lies above every row
        deleted (the table has no AUTOINCREMENT: a deleted top rowid would be drawn again)."""
        events = self._events
        table = events.events_table_name
        ids = orjson.dumps([aggregate_id.hex for aggregate_id in removal.versions]).decode()
        runs = orjson.dumps(list(removal.run_ids)).decode()
        with self.datastore.transaction(commit=True) as c:
            [tombstone] = events._insert_events(c, [removal.tombstone])
            c.execute(f"SELECT MAX(position) FROM {table} WHERE position < ?", (tombstone,))
            head: int = c.fetchone()[0] or 0
            c.execute(
                f"SELECT originator_id, MAX(originator_version) FROM {table} "
                "WHERE run_id IN (SELECT value FROM json_each(?)) AND topic NOT IN (?, ?) "
                "GROUP BY originator_id",
                (runs, *TOMBSTONE_TOPICS),
            )
            found = {UUID(row[0]): row[1] for row in c.fetchall()}
            if not same_tree(found, removal):
                raise TreeChangedError()
            # The log's payloads are packed: a run created since the judgement is read back
            # and asked for its root here, not by SQL.
            c.execute(
                f"SELECT {LOG_COLUMNS} FROM {table} WHERE position > ? AND topic = ? "
                "AND run_id NOT IN (SELECT value FROM json_each(?))",
                (removal.judged_at, CREATED_TOPIC, runs),
            )
            if any(created_in_tree(LogEntry(*row), removal.root_run_id) for row in c.fetchall()):
                raise TreeChangedError()
            c.execute(
                f"INSERT OR REPLACE INTO {ARCHIVED_TABLE} (aggregate_id, archive_id) "
                "SELECT value, ? FROM json_each(?)",
                (removal.archive_id.hex, ids),
            )
            c.execute(
                f"DELETE FROM {table} WHERE originator_id IN (SELECT value FROM json_each(?))",
                (ids,),
            )
            c.execute("SELECT changes()")
            if c.fetchone()[0] != removal.events:
                # Events of the tree's aggregates outside its runs: not what the bundle holds.
                raise TreeChangedError()
            c.execute(
                f"DELETE FROM {self._snapshots.events_table_name} "
                "WHERE originator_id IN (SELECT value FROM json_each(?))",
                (ids,),
            )
            if not write_views(c, head, tombstone):
                raise ViewsMovedError()
        return tombstone

    def restore_tree(self, restoral: TreeRestoral) -> list[int]:
        """Put a pruned tree back in one transaction (``storage.archived``); returns the new
        positions of its events and, last, of the tombstone's ``run-tree.restored``. The
        guard rows go first: the delete takes the file's write lock, and the inserts after it
        would be refused while they stood."""
        ids = orjson.dumps([aggregate_id.hex for aggregate_id in restoral.aggregate_ids]).decode()
        with self.datastore.transaction(commit=True) as c:
            c.execute(
                f"DELETE FROM {ARCHIVED_TABLE} WHERE archive_id = ? "
                "AND aggregate_id IN (SELECT value FROM json_each(?))",
                (restoral.archive_id.hex, ids),
            )
            c.execute("SELECT changes()")
            if c.fetchone()[0] != len(restoral.aggregate_ids):
                raise GuardMovedError()
            return self._events._insert_events(c, [*restoral.events, restoral.restored])

    def archived_by(self, aggregate_id: UUID) -> UUID | None:
        """The tombstone aggregate of the pruned tree ``aggregate_id`` was in, if it was."""
        with self.datastore.transaction(commit=False) as c:
            c.execute(
                f"SELECT archive_id FROM {ARCHIVED_TABLE} WHERE aggregate_id = ?",
                (aggregate_id.hex,),
            )
            row = c.fetchone()
        return None if row is None else UUID(row[0])

    def pool_usage(self) -> tuple[int, int, int | None]:
        """Pooled connections in use and idle (the library's pool does not count waiters)."""
        pool = self.datastore.pool
        return pool.num_in_use, pool.num_in_pool, None

    def __repr__(self) -> str:
        return f"SQLiteStorage({self.path!r})"

    def close(self) -> None:
        """Close every pooled connection to the file, and the lock file."""
        self.datastore.close()
        self._aggregate_locks.close()
