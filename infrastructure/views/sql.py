"""View stores on SQLite and PostgreSQL: the projections' tables live beside the event log.

Both generate their SQL from the projections' ``Table`` declarations; only the dialect
(placeholders, types, schema, how a writer takes its lock) differs. A page is one transaction
that first locks and checks every tracking row it moves, then writes all rows with
``executemany``. Reads are single statements, without an explicit transaction.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from abc import abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

import psycopg
from eventsourcing.persistence import PersistenceError
from eventsourcing.postgres import PostgresDatastore
from psycopg.rows import tuple_row

from runledger.infrastructure.storage.postgres import MOVED_SQLSTATE
from runledger.infrastructure.storage.sqlite import create_private_file
from runledger.infrastructure.views.store import (
    EncodedRow,
    PageCommit,
    Scan,
    TrackingConflictError,
    TrackingState,
    ViewReaderBase,
    ViewStore,
)
from runledger.projections.base import Key, Projection, Table

TRACKING_TABLE: Final = "runledger_projections"


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class Dialect:
    """What differs between SQLite and PostgreSQL in the generated statements."""

    placeholder: str
    types: Mapping[str, str]
    schema: str | None = None

    def table(self, name: str) -> str:
        """A table reference, schema-qualified where there is a schema."""
        return _quote(name) if self.schema is None else f"{_quote(self.schema)}.{_quote(name)}"


SQLITE: Final = Dialect("?", {"text": "TEXT", "int": "INTEGER", "bool": "INTEGER", "json": "TEXT"})


def postgres_dialect(schema: str) -> Dialect:
    """The PostgreSQL dialect, with tables in ``schema``."""
    return Dialect(
        "%s",
        {"text": "TEXT", "int": "BIGINT", "bool": "BOOLEAN", "json": "TEXT"},
        schema=schema,
    )


class _Sql:
    """The statements for one table."""

    def __init__(self, table: Table, dialect: Dialect) -> None:
        mark = dialect.placeholder
        columns = ", ".join(_quote(name) for name in table.column_names)
        marks = ", ".join(mark for _ in table.column_names)
        key = ", ".join(_quote(name) for name in table.key)
        updates = [name for name in table.column_names if name not in table.key]
        conflict = (
            "DO UPDATE SET " + ", ".join(f"{_quote(n)} = excluded.{_quote(n)}" for n in updates)
            if updates
            else "DO NOTHING"
        )
        key_match = " AND ".join(f"{_quote(name)} = {mark}" for name in table.key)
        name = dialect.table(table.name)
        self.upsert = (
            f"INSERT INTO {name} ({columns}) VALUES ({marks}) ON CONFLICT ({key}) {conflict}"
        )
        self.delete = f"DELETE FROM {name} WHERE {key_match}"
        self.fetch = f"SELECT {columns} FROM {name} WHERE {key_match}"


def _table_ddl(table: Table, dialect: Dialect) -> str:
    columns = ", ".join(f"{_quote(name)} {dialect.types[kind]}" for name, kind in table.columns)
    key = ", ".join(_quote(name) for name in table.key)
    return (
        f"CREATE TABLE IF NOT EXISTS {dialect.table(table.name)} ({columns}, PRIMARY KEY ({key}))"
    )


def _index_name(table: Table, index: tuple[str, ...]) -> str:
    return table.name + "_" + "_".join(index) + "_idx"


def _index_ddl(table: Table, dialect: Dialect) -> list[str]:
    statements = []
    for index in table.indexes:
        name = _quote(_index_name(table, index))
        columns = ", ".join(_quote(column) for column in index)
        statements.append(
            f"CREATE INDEX IF NOT EXISTS {name} ON {dialect.table(table.name)} ({columns})"
        )
    return statements


def _conditions(scan: Scan, mark: str) -> tuple[str, list[Any]]:
    """The scan's WHERE clause (empty without conditions) and its parameters."""
    conditions: list[str] = []
    params: list[Any] = []
    for name, value in scan.equals.items():
        conditions.append(f"{_quote(name)} = {mark}")
        params.append(value)
    for name, values in scan.within.items():
        listed = list(values)
        if not listed:
            conditions.append("1 = 0")
            continue
        conditions.append(f"{_quote(name)} IN ({', '.join(mark for _ in listed)})")
        params.extend(listed)
    if scan.order_by is not None and scan.after is not None:
        conditions.append(f"{_quote(scan.order_by)} {'<' if scan.descending else '>'} {mark}")
        params.append(scan.after)
    return (" WHERE " + " AND ".join(conditions) if conditions else ""), params


def _scan_sql(scan: Scan, dialect: Dialect) -> tuple[str, list[Any]]:
    where, params = _conditions(scan, dialect.placeholder)
    columns = ", ".join(_quote(name) for name in scan.table.column_names)
    statement = f"SELECT {columns} FROM {dialect.table(scan.table.name)}{where}"
    if scan.order_by is not None:
        statement += f" ORDER BY {_quote(scan.order_by)} {'DESC' if scan.descending else 'ASC'}"
    if scan.limit is not None:
        statement += f" LIMIT {int(scan.limit)}"
    return statement, params


class _Cursor(Protocol):
    """What both sqlite3 and psycopg give: statements and tuple rows."""

    def execute(self, statement: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, statement: Any, params: Any, /) -> Any: ...


class SqlViewStore(ViewStore):
    """The view store logic both SQL backends share."""

    dialect: Dialect

    def __init__(self) -> None:
        self._sql: dict[str, _Sql] = {}
        self._tracking_table = self.dialect.table(TRACKING_TABLE)
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self._tracking_table} (name TEXT PRIMARY KEY, "
                "version INTEGER NOT NULL, position BIGINT NOT NULL, last_error TEXT)"
            )

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[_Cursor]:
        """One write transaction, with whatever lock the backend needs to check positions."""

    @abstractmethod
    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One read statement's rows."""

    def _before_ddl(self, cursor: _Cursor) -> None:
        """Serialise schema changes where concurrent DDL can collide (PostgreSQL)."""

    def _statements(self, table: Table) -> _Sql:
        sql = self._sql.get(table.name)
        if sql is None:
            sql = self._sql[table.name] = _Sql(table, self.dialect)
        return sql

    def _tracking_statement(self) -> str:
        return (
            f"SELECT name, version, position, last_error FROM {self._tracking_table} "
            f"WHERE name = {self.dialect.placeholder}"
        )

    @abstractmethod
    def _exists(self, name: str) -> bool:
        """Whether a table or index of this name exists (in the schema)."""

    def _complete(self, projection: Projection) -> bool:
        return all(
            self._exists(table.name)
            and all(self._exists(_index_name(table, index)) for index in table.indexes)
            for table in projection.tables
        )

    def ensure(self, projection: Projection) -> TrackingState:
        mark = self.dialect.placeholder
        # Checked first, so opening a store never takes table locks (DDL, even IF NOT
        # EXISTS, locks the table) while other processes write views, unless something is
        # missing.
        complete = self._complete(projection)
        with self._transaction() as cursor:
            if not complete:
                self._before_ddl(cursor)
                for table in projection.tables:
                    cursor.execute(_table_ddl(table, self.dialect))
                    for statement in _index_ddl(table, self.dialect):
                        cursor.execute(statement)
            cursor.execute(
                f"INSERT INTO {self._tracking_table} (name, version, position) "
                f"VALUES ({mark}, {mark}, 0) ON CONFLICT (name) DO NOTHING",
                (projection.name, projection.version),
            )
            state = TrackingState(
                *cursor.execute(self._tracking_statement(), (projection.name,)).fetchone()
            )
        if state.version != projection.version:
            self.reset(projection)
            return TrackingState(projection.name, projection.version, 0, None)
        return state

    def reset(self, projection: Projection, *, defer_indexes: bool = False) -> None:
        mark = self.dialect.placeholder
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            for table in projection.tables:
                cursor.execute(f"DROP TABLE IF EXISTS {self.dialect.table(table.name)}")
                cursor.execute(_table_ddl(table, self.dialect))
                if not defer_indexes:
                    for statement in _index_ddl(table, self.dialect):
                        cursor.execute(statement)
            cursor.execute(
                f"INSERT INTO {self._tracking_table} (name, version, position) "
                f"VALUES ({mark}, {mark}, 0) ON CONFLICT (name) DO UPDATE SET "
                "version = excluded.version, position = 0, last_error = NULL",
                (projection.name, projection.version),
            )

    def create_indexes(self, projection: Projection) -> None:
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            for table in projection.tables:
                for statement in _index_ddl(table, self.dialect):
                    cursor.execute(statement)

    def tracking(self) -> list[TrackingState]:
        rows = self._query(
            f"SELECT name, version, position, last_error FROM {self._tracking_table} ORDER BY name"
        )
        return [TrackingState(*row) for row in rows]

    def fetch(self, table: Table, key: Key) -> EncodedRow | None:
        rows = self._query(self._statements(table).fetch, key)
        return dict(zip(table.column_names, rows[0], strict=True)) if rows else None

    def _move_statement(self) -> str:
        """Compare-and-set of one tracking row; it returns a row only if the position held."""
        mark = self.dialect.placeholder
        return (
            f"UPDATE {self._tracking_table} SET position = {mark}, last_error = NULL "
            f"WHERE name = {mark} AND position = {mark} RETURNING name"
        )

    @staticmethod
    def _moves(pages: Sequence[PageCommit]) -> list[tuple[int, str, int]]:
        # In name order, so two committers lock tracking rows alike and cannot deadlock.
        ordered = sorted(pages, key=lambda page: page.projection.name)
        return [(p.new_position, p.projection.name, p.expected_position) for p in ordered]

    def _writes(self, pages: Sequence[PageCommit]) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """(statement, rows) for every delete and upsert of the pages."""
        writes: list[tuple[str, list[tuple[Any, ...]]]] = []
        for page in pages:
            tables = {table.name: table for table in page.projection.tables}
            for table_name, changes in page.changes.items():
                sql = self._statements(tables[table_name])
                deletes = [key for key, row in changes.items() if row is None]
                upserts = [tuple(row.values()) for row in changes.values() if row is not None]
                if deletes:
                    writes.append((sql.delete, deletes))
                if upserts:
                    writes.append((sql.upsert, upserts))
        return writes

    def _conflict(self, name: str, expected: int) -> TrackingConflictError:
        rows = self._query(self._tracking_statement(), (name,))
        actual = TrackingState(*rows[0]).position if rows else 0
        return TrackingConflictError(name, expected, actual)

    def commit(self, pages: Sequence[PageCommit]) -> None:
        with self._transaction() as cursor:
            for new, name, expected in self._moves(pages):
                if cursor.execute(self._move_statement(), (new, name, expected)).fetchone() is None:
                    raise self._conflict(name, expected)
            for statement, rows in self._writes(pages):
                cursor.executemany(statement, rows)

    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        moves = self._moves(pages)
        # The events' insert holds the database's write lock: positions read now stay put
        # until the commit, so checking all before moving any writes nothing on a conflict.
        # Pages made with their events all move from one position to one other: one
        # statement checks them and one moves them.
        if len({(new, expected) for new, _, expected in moves}) == 1:
            new, _, expected = moves[0]
            names = [name for _, name, _ in moves]
            cursor.execute(self._count_at_statement(len(names)), (expected, *names))
            if cursor.fetchone()[0] != len(names):
                return False
            cursor.execute(self._move_all_statement(len(names)), (new, expected, *names))
        else:
            for _, name, expected in moves:
                cursor.execute(self._tracking_statement(), (name,))
                row = cursor.fetchone()
                if row is None or row[2] != expected:
                    return False
            for new, name, expected in moves:
                cursor.execute(self._move_statement(), (new, name, expected))
                cursor.fetchone()
        for statement, rows in self._writes(pages):
            cursor.executemany(statement, rows)
        return True

    def _count_at_statement(self, count: int) -> str:
        mark = self.dialect.placeholder
        names = ", ".join(mark for _ in range(count))
        return (
            f"SELECT COUNT(*) FROM {self._tracking_table} "
            f"WHERE position = {mark} AND name IN ({names})"
        )

    def _move_all_statement(self, count: int) -> str:
        mark = self.dialect.placeholder
        names = ", ".join(mark for _ in range(count))
        return (
            f"UPDATE {self._tracking_table} SET position = {mark}, last_error = NULL "
            f"WHERE position = {mark} AND name IN ({names})"
        )

    def record_error(self, name: str, error: str | None) -> None:
        mark = self.dialect.placeholder
        with self._transaction() as cursor:
            cursor.execute(
                f"UPDATE {self._tracking_table} SET last_error = {mark} WHERE name = {mark}",
                (error, name),
            )

    def reader(self) -> ViewReaderBase:
        return _SqlReader(self)


class _SqlReader(ViewReaderBase):
    def __init__(self, store: SqlViewStore) -> None:
        self._store = store

    def _get(self, table: Table, key: Key) -> EncodedRow | None:
        return self._store.fetch(table, key)

    def _scan(self, scan: Scan) -> Sequence[EncodedRow]:
        statement, params = _scan_sql(scan, self._store.dialect)
        names = scan.table.column_names
        return [dict(zip(names, row, strict=True)) for row in self._store._query(statement, params)]

    def _count(self, scan: Scan) -> int:
        where, params = _conditions(scan, self._store.dialect.placeholder)
        statement = f"SELECT COUNT(*) FROM {self._store.dialect.table(scan.table.name)}{where}"
        return int(self._store._query(statement, params)[0][0])


class SQLiteViewStore(SqlViewStore):
    """Views in the SQLite file of the event log; one connection per thread."""

    dialect = SQLITE

    def __init__(self, path: str, *, busy_timeout: float = 30.0) -> None:
        self.path = path
        create_private_file(path)
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        super().__init__()

    def _connection(self) -> sqlite3.Connection:
        connection: sqlite3.Connection | None = getattr(self._local, "connection", None)
        if connection is None:
            connection = sqlite3.connect(
                self.path,
                timeout=self.busy_timeout,
                isolation_level=None,
                check_same_thread=False,
            )
            connection.execute("PRAGMA journal_mode=WAL")
            # A view commit need not reach the disk at once: WAL keeps the file consistent,
            # and a page lost to a power cut is replayed from the event log.
            connection.execute("PRAGMA synchronous=NORMAL")
            # Pages of views are written in bulk: a bigger cache and fewer WAL checkpoints
            # (each copies the log into the file and syncs it) make page commits cheaper.
            connection.execute("PRAGMA cache_size=-65536")
            connection.execute("PRAGMA wal_autocheckpoint=10000")
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _transaction(self) -> Iterator[_Cursor]:
        connection = self._connection()
        # IMMEDIATE takes the write lock up front, so checking the tracking positions and
        # writing happen under one lock, across processes too.
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return self._connection().execute(statement, params).fetchall()

    def _exists(self, name: str) -> bool:
        return bool(self._query("SELECT 1 FROM sqlite_master WHERE name = ?", (name,)))

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()


def _moved_projection(error: BaseException) -> str | None:
    """The projection named by our 'position moved' error, or None for any other error."""
    cause = error.__cause__ or error.__context__
    while cause is not None and not isinstance(cause, psycopg.Error):
        cause = cause.__cause__ or cause.__context__
    if isinstance(cause, psycopg.Error) and cause.sqlstate == MOVED_SQLSTATE and cause.diag:
        return cause.diag.message_detail
    return None


class PostgresViewStore(SqlViewStore):
    """Views in the event log's PostgreSQL schema, through the storage's connection pool."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        self.datastore = datastore
        self.dialect = postgres_dialect(datastore.schema)
        self._move_function = f"{_quote(datastore.schema)}.runledger_move_projections"
        self._move_call = f"SELECT {self._move_function}(%s, %s, %s)".encode()
        super().__init__()
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION {self._move_function}"
                "(p_names text[], p_expected bigint[], p_new bigint[]) RETURNS void "
                "LANGUAGE plpgsql AS $$ DECLARE i integer; BEGIN "
                # One row at a time, in the given (name) order: committers lock alike.
                "FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP "
                f"UPDATE {self._tracking_table} SET position = p_new[i], last_error = NULL "
                "WHERE name = p_names[i] AND position = p_expected[i]; "
                "IF NOT FOUND THEN RAISE EXCEPTION 'projection % moved', p_names[i] "
                f"USING ERRCODE = '{MOVED_SQLSTATE}', DETAIL = p_names[i]; END IF; "
                "END LOOP; END $$"
            )

    @contextmanager
    def _transaction(self) -> Iterator[_Cursor]:
        with (
            self.datastore.get_connection() as connection,
            connection.transaction(),
            connection.cursor(row_factory=tuple_row) as cursor,
        ):
            yield cursor

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with (
            self.datastore.get_connection() as connection,
            connection.cursor(row_factory=tuple_row) as cursor,
        ):
            cursor.execute(statement.encode(), params)
            return cursor.fetchall()

    def _exists(self, name: str) -> bool:
        rows = self._query("SELECT to_regclass(%s) IS NOT NULL", (self.dialect.table(name),))
        return bool(rows[0][0])

    def _before_ddl(self, cursor: _Cursor) -> None:
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL's catalogue.
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"runledger-views"),))

    def create_indexes(self, projection: Projection) -> None:
        super().create_indexes(projection)
        # After a bulk load the planner knows nothing of the new rows: without statistics it
        # may scan a whole table where an index answers in a millisecond.
        with self._transaction() as cursor:
            for table in projection.tables:
                cursor.execute(f"ANALYZE {self.dialect.table(table.name)}")

    def commit(self, pages: Sequence[PageCommit]) -> None:
        """The whole transaction goes out as one pipeline of prepared statements.

        The tracking compare-and-set is a function that raises when a position moved, so a
        conflict aborts the transaction on the server and the COMMIT rolls it back.
        """
        try:
            with (
                self.datastore.get_connection() as connection,
                connection.pipeline(),
                connection.transaction(),
                connection.cursor() as cursor,
            ):
                # Views are rebuilt from the log, and a page's tracking commits with its rows:
                # a page lost in a crash is projected again, so no need to wait for the disk.
                cursor.execute(b"SET LOCAL synchronous_commit = off")
                self.write_with_events(cursor, pages)
        except PersistenceError as error:
            moved = _moved_projection(error)
            if moved is None:
                raise
            expected = next(
                page.expected_position for page in pages if page.projection.name == moved
            )
            raise self._conflict(moved, expected) from error

    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        moves = self._moves(pages)
        if moves:
            cursor.execute(
                self._move_call,
                (
                    [name for _, name, _ in moves],
                    [expected for _, _, expected in moves],
                    [new for new, _, _ in moves],
                ),
            )
        for statement, rows in self._writes(pages):
            cursor.executemany(statement.encode(), rows)
        return True
