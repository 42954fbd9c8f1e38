"""View stores on SQLite and PostgreSQL: the projections' tables live beside the event log.

Both generate their SQL from the projections' ``Table`` declarations; only the dialect
(placeholders, types, locking) differs. A page is one transaction that first locks and checks
every tracking row it moves, then writes all rows with ``executemany``.
"""

from __future__ import annotations

import sqlite3
import threading
import zlib
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, Final

from eventsourcing.postgres import PostgresDatastore
from psycopg import Cursor
from psycopg.rows import DictRow
from psycopg.sql import SQL, Identifier

from infrastructure.view_store import (
    EncodedRow,
    PageCommit,
    TrackingConflictError,
    TrackingState,
    ViewReaderBase,
    ViewStore,
)
from projections.base import Key, Projection, Table

TRACKING_TABLE: Final = "runledger_projections"


class _Sql:
    """Statements for one table in one dialect (placeholder style and types differ)."""

    TYPES: ClassVar[dict[str, str]]

    def __init__(self, table: Table, placeholder: str, quote: Any) -> None:
        self.table = table
        q = quote
        columns = ", ".join(q(name) for name in table.column_names)
        marks = ", ".join(placeholder for _ in table.column_names)
        key = ", ".join(q(name) for name in table.key)
        updates = [name for name in table.column_names if name not in table.key]
        conflict = (
            "DO UPDATE SET " + ", ".join(f"{q(n)} = excluded.{q(n)}" for n in updates)
            if updates
            else "DO NOTHING"
        )
        key_match = " AND ".join(f"{q(name)} = {placeholder}" for name in table.key)
        self.name = q(table.name)
        self.columns = columns
        self.upsert = (
            f"INSERT INTO {self.name} ({columns}) VALUES ({marks}) ON CONFLICT ({key}) {conflict}"
        )
        self.delete = f"DELETE FROM {self.name} WHERE {key_match}"
        self.fetch = f"SELECT {columns} FROM {self.name} WHERE {key_match}"


def _ddl(table: Table, types: Mapping[str, str], quote: Any, index_prefix: str = "") -> list[str]:
    columns = ", ".join(f"{quote(name)} {types[kind]}" for name, kind in table.columns)
    key = ", ".join(quote(name) for name in table.key)
    statements = [
        f"CREATE TABLE IF NOT EXISTS {quote(table.name)} ({columns}, PRIMARY KEY ({key}))"
    ]
    for index in table.indexes:
        index_name = quote(f"{index_prefix}{table.name}_{'_'.join(index)}_idx")
        statements.append(
            f"CREATE INDEX IF NOT EXISTS {index_name} ON {quote(table.name)} "
            f"({', '.join(quote(name) for name in index)})"
        )
    return statements


def _scan_sql(
    table: Table,
    placeholder: str,
    quote: Any,
    equals: Mapping[str, Any],
    within: Mapping[str, Collection[Any]],
    order_by: str | None,
    descending: bool,
    after: Any,
    limit: int | None,
) -> tuple[str, list[Any]]:
    columns = ", ".join(quote(name) for name in table.column_names)
    conditions: list[str] = []
    params: list[Any] = []
    for name, value in equals.items():
        conditions.append(f"{quote(name)} = {placeholder}")
        params.append(value)
    for name, values in within.items():
        values = list(values)
        if not values:
            conditions.append("1 = 0")
            continue
        conditions.append(f"{quote(name)} IN ({', '.join(placeholder for _ in values)})")
        params.extend(values)
    if order_by is not None and after is not None:
        conditions.append(f"{quote(order_by)} {'<' if descending else '>'} {placeholder}")
        params.append(after)
    statement = f"SELECT {columns} FROM {quote(table.name)}"
    if conditions:
        statement += " WHERE " + " AND ".join(conditions)
    if order_by is not None:
        statement += f" ORDER BY {quote(order_by)} {'DESC' if descending else 'ASC'}"
    if limit is not None:
        statement += f" LIMIT {int(limit)}"
    return statement, params


def _sqlite_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


SQLITE_TYPES: Final = {"text": "TEXT", "int": "INTEGER", "bool": "INTEGER", "json": "TEXT"}
POSTGRES_TYPES: Final = {"text": "TEXT", "int": "BIGINT", "bool": "BOOLEAN", "json": "TEXT"}


class SQLiteViewStore(ViewStore):
    """Views in the SQLite file of the event log; one connection per thread."""

    def __init__(self, path: str, *, busy_timeout: float = 30.0) -> None:
        self.path = path
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        self._sql: dict[str, _Sql] = {}
        with self._write() as connection:
            connection.execute(
                f"CREATE TABLE IF NOT EXISTS {TRACKING_TABLE} (name TEXT PRIMARY KEY, "
                "version INTEGER NOT NULL, position INTEGER NOT NULL, last_error TEXT)"
            )

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
            # WAL makes NORMAL durable against application crashes; a power loss may drop
            # the last pages, which a projection simply replays from the event log.
            connection.execute("PRAGMA synchronous=NORMAL")
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        connection = self._connection()
        # IMMEDIATE takes the write lock up front, so checking the tracking position and
        # writing happen under one lock even across processes.
        connection.execute("BEGIN IMMEDIATE")
        try:
            yield connection
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        connection.execute("COMMIT")

    def _statements(self, table: Table) -> _Sql:
        sql = self._sql.get(table.name)
        if sql is None:
            sql = self._sql[table.name] = _Sql(table, "?", _sqlite_quote)
        return sql

    def ensure(self, projection: Projection) -> TrackingState:
        with self._write() as connection:
            for table in projection.tables:
                for statement in _ddl(table, SQLITE_TYPES, _sqlite_quote):
                    connection.execute(statement)
            connection.execute(
                f"INSERT INTO {TRACKING_TABLE} (name, version, position) VALUES (?, ?, 0) "
                "ON CONFLICT (name) DO NOTHING",
                (projection.name, projection.version),
            )
            state = self._tracking_row(connection, projection.name)
        if state.version != projection.version:
            self.reset(projection)
            return TrackingState(projection.name, projection.version, 0, None)
        return state

    def reset(self, projection: Projection) -> None:
        with self._write() as connection:
            for table in projection.tables:
                connection.execute(f"DROP TABLE IF EXISTS {_sqlite_quote(table.name)}")
                for statement in _ddl(table, SQLITE_TYPES, _sqlite_quote):
                    connection.execute(statement)
            connection.execute(
                f"INSERT INTO {TRACKING_TABLE} (name, version, position) VALUES (?, ?, 0) "
                "ON CONFLICT (name) DO UPDATE SET version = excluded.version, position = 0, "
                "last_error = NULL",
                (projection.name, projection.version),
            )

    @staticmethod
    def _tracking_row(connection: sqlite3.Connection, name: str) -> TrackingState:
        row = connection.execute(
            f"SELECT name, version, position, last_error FROM {TRACKING_TABLE} WHERE name = ?",
            (name,),
        ).fetchone()
        return TrackingState(*row)

    def tracking(self) -> list[TrackingState]:
        rows = self._connection().execute(
            f"SELECT name, version, position, last_error FROM {TRACKING_TABLE} ORDER BY name"
        )
        return [TrackingState(*row) for row in rows.fetchall()]

    def fetch(self, table: Table, key: Key) -> EncodedRow | None:
        sql = self._statements(table)
        row = self._connection().execute(sql.fetch, key).fetchone()
        return None if row is None else dict(zip(table.column_names, row, strict=True))

    def commit(self, pages: Sequence[PageCommit]) -> None:
        with self._write() as connection:
            for page in pages:
                state = self._tracking_row(connection, page.projection.name)
                if state.position != page.expected_position:
                    raise TrackingConflictError(state.name, page.expected_position, state.position)
            for page in pages:
                tables = {table.name: table for table in page.projection.tables}
                for table_name, changes in page.changes.items():
                    self._write_changes(connection, tables[table_name], changes)
                connection.execute(
                    f"UPDATE {TRACKING_TABLE} SET position = ?, last_error = NULL WHERE name = ?",
                    (page.new_position, page.projection.name),
                )

    def _write_changes(
        self, connection: sqlite3.Connection, table: Table, changes: Mapping[Key, EncodedRow | None]
    ) -> None:
        sql = self._statements(table)
        upserts = [tuple(row.values()) for row in changes.values() if row is not None]
        deletes = [key for key, row in changes.items() if row is None]
        if deletes:
            connection.executemany(sql.delete, deletes)
        if upserts:
            connection.executemany(sql.upsert, upserts)

    def record_error(self, name: str, error: str | None) -> None:
        with self._write() as connection:
            connection.execute(
                f"UPDATE {TRACKING_TABLE} SET last_error = ? WHERE name = ?", (error, name)
            )

    def reader(self) -> ViewReaderBase:
        return _SQLiteReader(self)

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()


class _SQLiteReader(ViewReaderBase):
    def __init__(self, store: SQLiteViewStore) -> None:
        self._store = store

    def _get(self, table: Table, key: Key) -> Mapping[str, Any] | None:
        return self._store.fetch(table, key)

    def _scan(
        self,
        table: Table,
        equals: Mapping[str, Any],
        within: Mapping[str, Collection[Any]],
        order_by: str | None,
        descending: bool,
        after: Any,
        limit: int | None,
    ) -> Sequence[Mapping[str, Any]]:
        statement, params = _scan_sql(
            table, "?", _sqlite_quote, equals, within, order_by, descending, after, limit
        )
        rows = self._store._connection().execute(statement, params).fetchall()
        return [dict(zip(table.column_names, row, strict=True)) for row in rows]

    def count(self, table: Table, *, equals: Mapping[str, Any] | None = None) -> int:
        conditions = " AND ".join(f"{_sqlite_quote(name)} = ?" for name in equals or {})
        statement = f"SELECT COUNT(*) FROM {_sqlite_quote(table.name)}"
        if conditions:
            statement += f" WHERE {conditions}"
        row = self._store._connection().execute(statement, list((equals or {}).values()))
        count: int = row.fetchone()[0]
        return count


def _pg_quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PostgresViewStore(ViewStore):
    """Views in the event log's PostgreSQL schema, through the storage's connection pool."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        self.datastore = datastore
        self.schema = datastore.schema
        self._sql: dict[str, _Sql] = {}
        with self._transaction() as curs:
            self._lock_ddl(curs)
            curs.execute(
                f"CREATE TABLE IF NOT EXISTS {TRACKING_TABLE} (name TEXT PRIMARY KEY, "
                "version INTEGER NOT NULL, position BIGINT NOT NULL, last_error TEXT)".encode()
            )

    @contextmanager
    def _transaction(self) -> Iterator[Cursor[DictRow]]:
        # Unqualified table names in generated SQL resolve to the storage's schema.
        with (
            self.datastore.get_connection() as connection,
            connection.transaction(),
            connection.cursor() as curs,
        ):
            curs.execute(SQL("SET LOCAL search_path TO {0}").format(Identifier(self.schema)))
            yield curs

    @staticmethod
    def _lock_ddl(curs: Cursor[DictRow]) -> None:
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL's catalogue.
        curs.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"runledger-views"),))

    def _statements(self, table: Table) -> _Sql:
        sql = self._sql.get(table.name)
        if sql is None:
            sql = self._sql[table.name] = _Sql(table, "%s", _pg_quote)
        return sql

    def ensure(self, projection: Projection) -> TrackingState:
        with self._transaction() as curs:
            self._lock_ddl(curs)
            for table in projection.tables:
                for statement in _ddl(table, POSTGRES_TYPES, _pg_quote):
                    curs.execute(statement.encode())
            curs.execute(
                f"INSERT INTO {TRACKING_TABLE} (name, version, position) VALUES (%s, %s, 0) "
                "ON CONFLICT (name) DO NOTHING",
                (projection.name, projection.version),
            )
            state = self._tracking_row(curs, projection.name, lock=False)
        if state.version != projection.version:
            self.reset(projection)
            return TrackingState(projection.name, projection.version, 0, None)
        return state

    def reset(self, projection: Projection) -> None:
        with self._transaction() as curs:
            self._lock_ddl(curs)
            for table in projection.tables:
                curs.execute(f"DROP TABLE IF EXISTS {_pg_quote(table.name)}".encode())
                for statement in _ddl(table, POSTGRES_TYPES, _pg_quote):
                    curs.execute(statement.encode())
            curs.execute(
                f"INSERT INTO {TRACKING_TABLE} (name, version, position) VALUES (%s, %s, 0) "
                "ON CONFLICT (name) DO UPDATE SET version = excluded.version, position = 0, "
                "last_error = NULL",
                (projection.name, projection.version),
            )

    @staticmethod
    def _tracking_row(curs: Cursor[DictRow], name: str, *, lock: bool) -> TrackingState:
        curs.execute(
            f"SELECT name, version, position, last_error FROM {TRACKING_TABLE} WHERE name = %s"
            + (" FOR UPDATE" if lock else ""),
            (name,),
        )
        row = curs.fetchone()
        if row is None:
            raise LookupError(f"projection {name} has no tracking row")
        return TrackingState(row["name"], row["version"], row["position"], row["last_error"])

    def tracking(self) -> list[TrackingState]:
        with self._transaction() as curs:
            curs.execute(
                f"SELECT name, version, position, last_error FROM {TRACKING_TABLE} ORDER BY name"
            )
            return [
                TrackingState(row["name"], row["version"], row["position"], row["last_error"])
                for row in curs.fetchall()
            ]

    def fetch(self, table: Table, key: Key) -> EncodedRow | None:
        with self._transaction() as curs:
            curs.execute(self._statements(table).fetch.encode(), key)
            row = curs.fetchone()
            return None if row is None else dict(row)

    def commit(self, pages: Sequence[PageCommit]) -> None:
        with self._transaction() as curs:
            # Lock the tracking rows in name order so two committers cannot deadlock.
            for page in sorted(pages, key=lambda page: page.projection.name):
                state = self._tracking_row(curs, page.projection.name, lock=True)
                if state.position != page.expected_position:
                    raise TrackingConflictError(state.name, page.expected_position, state.position)
            for page in pages:
                tables = {table.name: table for table in page.projection.tables}
                for table_name, changes in page.changes.items():
                    self._write_changes(curs, tables[table_name], changes)
                curs.execute(
                    f"UPDATE {TRACKING_TABLE} SET position = %s, last_error = NULL WHERE name = %s",
                    (page.new_position, page.projection.name),
                )

    def _write_changes(
        self, curs: Cursor[DictRow], table: Table, changes: Mapping[Key, EncodedRow | None]
    ) -> None:
        sql = self._statements(table)
        upserts = [tuple(row.values()) for row in changes.values() if row is not None]
        deletes = [key for key, row in changes.items() if row is None]
        if deletes:
            curs.executemany(sql.delete.encode(), deletes)
        if upserts:
            curs.executemany(sql.upsert.encode(), upserts)

    def record_error(self, name: str, error: str | None) -> None:
        with self._transaction() as curs:
            curs.execute(
                f"UPDATE {TRACKING_TABLE} SET last_error = %s WHERE name = %s", (error, name)
            )

    def reader(self) -> ViewReaderBase:
        return _PostgresReader(self)


class _PostgresReader(ViewReaderBase):
    def __init__(self, store: PostgresViewStore) -> None:
        self._store = store

    def _get(self, table: Table, key: Key) -> Mapping[str, Any] | None:
        return self._store.fetch(table, key)

    def _scan(
        self,
        table: Table,
        equals: Mapping[str, Any],
        within: Mapping[str, Collection[Any]],
        order_by: str | None,
        descending: bool,
        after: Any,
        limit: int | None,
    ) -> Sequence[Mapping[str, Any]]:
        statement, params = _scan_sql(
            table, "%s", _pg_quote, equals, within, order_by, descending, after, limit
        )
        with self._store._transaction() as curs:
            curs.execute(statement.encode(), params)
            return [dict(row) for row in curs.fetchall()]

    def count(self, table: Table, *, equals: Mapping[str, Any] | None = None) -> int:
        conditions = " AND ".join(f"{_pg_quote(name)} = %s" for name in equals or {})
        statement = f"SELECT COUNT(*) AS n FROM {_pg_quote(table.name)}"
        if conditions:
            statement += f" WHERE {conditions}"
        with self._store._transaction() as curs:
            curs.execute(statement.encode(), list((equals or {}).values()))
            row = curs.fetchone()
            return 0 if row is None else int(row["n"])
