"""View stores on SQLite and PostgreSQL: the projections' tables live beside the event log.

Both generate their SQL from the projections' ``Table`` declarations; only the dialect
(placeholders, types, schema, how a writer takes its lock) differs. A page is one transaction
that first locks and checks every tracking row it moves, then writes all rows with
``executemany``. Reads are single statements, without an explicit transaction.

Each projection's tables exist once per slot (``ViewStore.physical_name``); the registry
(``runledger_view_registry``) names the active and the building slot and holds the build
lock, ``runledger_view_slots`` the position of each slot. The logical table names are views
onto the active slot, for operators' ad-hoc SQL (where a table written before slots existed
still holds the name, it keeps it until that slot is dropped).
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sqlite3
import threading
import time
import zlib
from abc import abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass
from typing import Any, Final, Protocol

import psycopg
from eventsourcing.persistence import PersistenceError
from eventsourcing.postgres import PostgresDatastore
from psycopg.rows import tuple_row

from runledger.infrastructure.databases import MOVED_SQLSTATE, create_private_file, psycopg_cause
from runledger.infrastructure.views.store import (
    LEGACY_SLOT,
    EncodedRow,
    PageCommit,
    Registry,
    Scan,
    TrackingConflictError,
    TrackingState,
    ViewReaderBase,
    ViewStore,
)
from runledger.projections.base import Key, Projection, Table

REGISTRY_TABLE: Final = "runledger_view_registry"
SLOTS_TABLE: Final = "runledger_view_slots"
LEGACY_TRACKING_TABLE: Final = "runledger_projections"
"""Where views were tracked before slots: its rows are adopted as slot 0 on first open."""
STREAM_BATCH: Final = 2000
MAX_IDENTIFIER: Final = 63
"""PostgreSQL cuts longer names, so a longer index name is shortened with a hash of it."""


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


SQLITE: Final = Dialect(
    "?", {"text": "TEXT", "int": "INTEGER", "bool": "INTEGER", "json": "TEXT", "real": "REAL"}
)


def postgres_dialect(schema: str) -> Dialect:
    """The PostgreSQL dialect, with tables in ``schema``."""
    return Dialect(
        "%s",
        {
            "text": "TEXT",
            "int": "BIGINT",
            "bool": "BOOLEAN",
            "json": "TEXT",
            "real": "DOUBLE PRECISION",
        },
        schema=schema,
    )


class _Sql:
    """The statements for one table of one slot."""

    def __init__(self, table: Table, dialect: Dialect, physical: str) -> None:
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
        name = dialect.table(physical)
        self.upsert = (
            f"INSERT INTO {name} ({columns}) VALUES ({marks}) ON CONFLICT ({key}) {conflict}"
        )
        self.delete = f"DELETE FROM {name} WHERE {key_match}"
        self.fetch = f"SELECT {columns} FROM {name} WHERE {key_match}"


def _table_ddl(table: Table, dialect: Dialect, physical: str) -> str:
    columns = ", ".join(f"{_quote(name)} {dialect.types[kind]}" for name, kind in table.columns)
    key = ", ".join(_quote(name) for name in table.key)
    return f"CREATE TABLE IF NOT EXISTS {dialect.table(physical)} ({columns}, PRIMARY KEY ({key}))"


def _index_name(physical: str, index: tuple[str, ...]) -> str:
    name = physical + "_" + "_".join(index) + "_idx"
    if len(name) <= MAX_IDENTIFIER:
        return name
    return f"{physical[: MAX_IDENTIFIER - 14]}_{zlib.crc32(name.encode()):08x}_idx"


def _index_ddl(table: Table, dialect: Dialect, physical: str) -> list[str]:
    statements = []
    for index in table.indexes:
        name = _quote(_index_name(physical, index))
        columns = ", ".join(_quote(column) for column in index)
        statements.append(
            f"CREATE INDEX IF NOT EXISTS {name} ON {dialect.table(physical)} ({columns})"
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


def _scan_sql(scan: Scan, dialect: Dialect, physical: str) -> tuple[str, list[Any]]:
    where, params = _conditions(scan, dialect.placeholder)
    columns = ", ".join(_quote(name) for name in scan.table.column_names)
    statement = f"SELECT {columns} FROM {dialect.table(physical)}{where}"
    if scan.order_by is not None:
        statement += f" ORDER BY {_quote(scan.order_by)} {'DESC' if scan.descending else 'ASC'}"
    if scan.limit is not None:
        statement += f" LIMIT {int(scan.limit)}"
    return statement, params


class _Cursor(Protocol):
    """What both sqlite3 and psycopg give: statements and tuple rows."""

    def execute(self, statement: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, statement: Any, params: Any, /) -> Any: ...


_SLOT_COLUMNS: Final = "s.name, s.version, s.position, s.last_error, s.slot, s.state, s.tables"


def _slot_of(row: Sequence[Any]) -> TrackingState:
    name, version, position, last_error, slot, state, tables = row
    return TrackingState(
        name, int(version), int(position), last_error, int(slot), state, tuple(json.loads(tables))
    )


def lock_owner() -> str:
    """This process's name as a build-lock holder: host, pid and a random token."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


def _holder_gone(owner: str) -> bool:
    """Whether the lock's holder is a process of this host that no longer runs."""
    host, _, rest = owner.partition(":")
    pid_text = rest.partition(":")[0]
    if host != socket.gethostname() or not pid_text.isdigit():
        return False
    try:
        os.kill(int(pid_text), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return _is_zombie(int(pid_text))


def _is_zombie(pid: int) -> bool:
    """Whether the process has ended but was not reaped: a killed rebuild's groups are
    orphans, and where nothing reaps orphans (a container's PID 1 often does not) they stay
    zombies, which signal 0 still finds."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            # The state follows the command name, which is in parentheses and may hold any.
            return stat.read().rpartition(b")")[2].split()[0] == b"Z"
    except (OSError, IndexError):
        return False


class SqlViewStore(ViewStore):
    """The view store logic both SQL backends share."""

    dialect: Dialect

    def __init__(self) -> None:
        super().__init__()
        self._sql: dict[str, _Sql] = {}
        self._registry_table = self.dialect.table(REGISTRY_TABLE)
        self._slots_table = self.dialect.table(SLOTS_TABLE)
        if self._exists(REGISTRY_TABLE) and self._exists(SLOTS_TABLE):
            return
        real = self.dialect.types["real"]
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self._registry_table} (name TEXT PRIMARY KEY, "
                "active_slot INTEGER, building_slot INTEGER, next_slot INTEGER NOT NULL, "
                f"lock_owner TEXT, lock_expires {real})"
            )
            cursor.execute(
                f"CREATE TABLE IF NOT EXISTS {self._slots_table} (name TEXT NOT NULL, "
                "slot INTEGER NOT NULL, version INTEGER NOT NULL, position BIGINT NOT NULL, "
                "last_error TEXT, state TEXT NOT NULL, tables TEXT NOT NULL, "
                "PRIMARY KEY (name, slot))"
            )

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[_Cursor]:
        """One write transaction, with whatever lock the backend needs to check positions."""

    @abstractmethod
    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One read statement's rows."""

    @abstractmethod
    def _kind(self, cursor: _Cursor | None, name: str) -> str | None:
        """``table``, ``view`` (or ``index``) if an object of this name exists, else None."""

    @abstractmethod
    def _columns(self, physical: str) -> list[str]:
        """The column names of a physical table, in order."""

    def _before_ddl(self, cursor: _Cursor) -> None:
        """Serialise schema changes where concurrent DDL can collide (PostgreSQL)."""

    def _lock_registry(self, cursor: _Cursor, name: str) -> None:
        """Lock the projection's registry row until the transaction ends (PostgreSQL)."""

    def _exists(self, name: str) -> bool:
        return self._kind(None, name) is not None

    def _statements(self, table: Table, slot: TrackingState) -> _Sql:
        return self._sql_of(table, self.physical_name(table, slot))

    def _sql_of(self, table: Table, physical: str) -> _Sql:
        sql = self._sql.get(physical)
        if sql is None:
            sql = self._sql[physical] = _Sql(table, self.dialect, physical)
        return sql

    # -- registry ---------------------------------------------------------------------------

    def _slot_statement(self, where: str) -> str:
        return f"SELECT {_SLOT_COLUMNS} FROM {self._slots_table} s WHERE {where}"

    def _read_registry(self, cursor: _Cursor | None, name: str) -> Registry:
        mark = self.dialect.placeholder
        statement = (
            "SELECT active_slot, building_slot, lock_owner, lock_expires "
            f"FROM {self._registry_table} WHERE name = {mark}"
        )
        slots_statement = self._slot_statement(f"s.name = {mark}")
        if cursor is None:
            rows = self._query(statement, (name,))
            slot_rows = self._query(slots_statement, (name,))
        else:
            rows = cursor.execute(statement, (name,)).fetchall()
            slot_rows = cursor.execute(slots_statement, (name,)).fetchall()
        if not rows:
            return Registry(name, None, None, None, None)
        active_slot, building_slot, owner, expires = rows[0]
        slots = {state.slot: state for state in map(_slot_of, slot_rows)}
        return Registry(
            name,
            slots.get(active_slot) if active_slot is not None else None,
            slots.get(building_slot) if building_slot is not None else None,
            owner,
            expires,
        )

    def registry(self, name: str) -> Registry:
        return self._read_registry(None, name)

    def _complete(self, projection: Projection, slot: TrackingState) -> bool:
        return all(
            self._exists(self.physical_name(table, slot))
            and all(
                self._exists(_index_name(self.physical_name(table, slot), index))
                for index in table.indexes
            )
            for table in projection.tables
        )

    def _create_tables(
        self, cursor: _Cursor, projection: Projection, slot: TrackingState, *, indexes: bool
    ) -> None:
        for table in projection.tables:
            physical = self.physical_name(table, slot)
            cursor.execute(_table_ddl(table, self.dialect, physical))
            if indexes:
                for statement in _index_ddl(table, self.dialect, physical):
                    cursor.execute(statement)

    def _insert_slot(self, cursor: _Cursor, slot: TrackingState) -> None:
        mark = self.dialect.placeholder
        cursor.execute(
            f"INSERT INTO {self._slots_table} (name, slot, version, position, last_error, "
            f"state, tables) VALUES ({', '.join([mark] * 7)})",
            (
                slot.name,
                slot.slot,
                slot.version,
                slot.position,
                slot.last_error,
                slot.state,
                json.dumps(list(slot.tables)),
            ),
        )

    def _new_slot(self, cursor: _Cursor, projection: Projection, state: str) -> TrackingState:
        mark = self.dialect.placeholder
        [(number,)] = cursor.execute(
            f"UPDATE {self._registry_table} SET next_slot = next_slot + 1 "
            f"WHERE name = {mark} RETURNING next_slot - 1",
            (projection.name,),
        ).fetchall()
        slot = TrackingState(
            projection.name,
            projection.version,
            0,
            None,
            slot=int(number),
            state=state,  # type: ignore[arg-type]
            tables=tuple(table.name for table in projection.tables),
        )
        self._insert_slot(cursor, slot)
        return slot

    def _legacy_slot(self, cursor: _Cursor, projection: Projection) -> TrackingState | None:
        """The projection's tables as written before slots existed, adopted as slot 0."""
        if self._kind(cursor, LEGACY_TRACKING_TABLE) != "table":
            return None
        if any(self._kind(cursor, table.name) != "table" for table in projection.tables):
            return None
        rows = cursor.execute(
            "SELECT version, position, last_error FROM "
            f"{self.dialect.table(LEGACY_TRACKING_TABLE)} WHERE name = {self.dialect.placeholder}",
            (projection.name,),
        ).fetchall()
        if not rows:
            return None
        version, position, last_error = rows[0]
        return TrackingState(
            projection.name,
            int(version),
            int(position),
            last_error,
            slot=LEGACY_SLOT,
            state="active",
            tables=tuple(table.name for table in projection.tables),
        )

    def _point_views(self, cursor: _Cursor, active: TrackingState) -> None:
        """Make each logical table name a view onto the active slot, where the name is free."""
        if active.slot == LEGACY_SLOT:
            return
        for name in active.tables:
            if self._kind(cursor, name) == "table":
                continue  # a table from before slots: it keeps the name until it is dropped
            cursor.execute(f"DROP VIEW IF EXISTS {self.dialect.table(name)}")
            cursor.execute(
                f"CREATE VIEW {self.dialect.table(name)} AS SELECT * FROM "
                f"{self.dialect.table(self.physical_name(name, active))}"
            )

    def ensure(self, projection: Projection) -> TrackingState:
        mark = self.dialect.placeholder
        # Checked first, so opening a store never takes table locks (DDL, even IF NOT
        # EXISTS, locks the table) while other processes write views, unless something is
        # missing.
        active = self.registry(projection.name).active
        if active is not None and (
            active.version != projection.version or self._complete(projection, active)
        ):
            self._known(projection, active)
            return active
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            cursor.execute(
                f"INSERT INTO {self._registry_table} (name, next_slot) VALUES ({mark}, 1) "
                "ON CONFLICT (name) DO NOTHING",
                (projection.name,),
            )
            self._lock_registry(cursor, projection.name)
            active = self._read_registry(cursor, projection.name).active
            if active is None:
                active = self._legacy_slot(cursor, projection)
                if active is not None:
                    self._insert_slot(cursor, active)
                else:
                    active = self._new_slot(cursor, projection, "active")
                cursor.execute(
                    f"UPDATE {self._registry_table} SET active_slot = {mark} WHERE name = {mark}",
                    (active.slot, projection.name),
                )
            if active.version == projection.version:
                self._create_tables(cursor, projection, active, indexes=True)
            self._point_views(cursor, active)
        self._known(projection, active)
        return active

    def begin_build(self, projection: Projection, *, restart: bool = False) -> TrackingState:
        mark = self.dialect.placeholder
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            self._lock_registry(cursor, projection.name)
            building = self._read_registry(cursor, projection.name).building
            if building is not None:
                if not restart and building.version == projection.version:
                    return building
                self._drop_tables(cursor, building)
            slot = self._new_slot(cursor, projection, "building")
            self._create_tables(cursor, projection, slot, indexes=False)
            cursor.execute(
                f"UPDATE {self._registry_table} SET building_slot = {mark} WHERE name = {mark}",
                (slot.slot, projection.name),
            )
            return slot

    def switch(self, projection: Projection, building: TrackingState) -> TrackingState | None:
        mark = self.dialect.placeholder
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            self._lock_registry(cursor, projection.name)
            registry = self._read_registry(cursor, projection.name)
            if registry.building is None or registry.building.slot != building.slot:
                raise TrackingConflictError(projection.name, building.position, -1)
            retired = None
            if registry.active is not None:
                retired = dataclasses.replace(registry.active, state="retired")
                cursor.execute(
                    f"UPDATE {self._slots_table} SET state = 'retired' "
                    f"WHERE name = {mark} AND slot = {mark}",
                    (projection.name, retired.slot),
                )
            cursor.execute(
                f"UPDATE {self._slots_table} SET state = 'active' "
                f"WHERE name = {mark} AND slot = {mark}",
                (projection.name, building.slot),
            )
            cursor.execute(
                f"UPDATE {self._registry_table} SET active_slot = {mark}, building_slot = NULL "
                f"WHERE name = {mark}",
                (building.slot, projection.name),
            )
            active = dataclasses.replace(registry.building, state="active")
            self._point_views(cursor, active)
        self._known(projection, active)
        return retired

    def _drop_tables(self, cursor: _Cursor, slot: TrackingState) -> None:
        mark = self.dialect.placeholder
        for name in slot.tables:
            cursor.execute(
                f"DROP TABLE IF EXISTS {self.dialect.table(self.physical_name(name, slot))}"
            )
        cursor.execute(
            f"DELETE FROM {self._slots_table} WHERE name = {mark} AND slot = {mark}",
            (slot.name, slot.slot),
        )
        cursor.execute(
            f"UPDATE {self._registry_table} SET building_slot = NULL "
            f"WHERE name = {mark} AND building_slot = {mark}",
            (slot.name, slot.slot),
        )

    def drop_slot(self, slot: TrackingState) -> None:
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            self._lock_registry(cursor, slot.name)
            registry = self._read_registry(cursor, slot.name)
            if registry.active is not None and registry.active.slot == slot.slot:
                raise TrackingConflictError(slot.name, slot.position, -1)
            self._drop_tables(cursor, slot)
            if registry.active is not None:
                # The names a slot-0 table held are free now: views onto the active slot.
                self._point_views(cursor, registry.active)

    def retired_slots(self, name: str) -> list[TrackingState]:
        mark = self.dialect.placeholder
        rows = self._query(
            self._slot_statement(f"s.name = {mark} AND s.state = 'retired'") + " ORDER BY s.slot",
            (name,),
        )
        return [_slot_of(row) for row in rows]

    def try_lock(self, name: str, owner: str, *, lease_seconds: float) -> str | None:
        mark = self.dialect.placeholder
        with self._transaction() as cursor:
            cursor.execute(
                f"INSERT INTO {self._registry_table} (name, next_slot) VALUES ({mark}, 1) "
                "ON CONFLICT (name) DO NOTHING",
                (name,),
            )
            self._lock_registry(cursor, name)
            [(holder, expires)] = cursor.execute(
                f"SELECT lock_owner, lock_expires FROM {self._registry_table} WHERE name = {mark}",
                (name,),
            ).fetchall()
            now = time.time()
            free = holder is None or holder == owner or (expires or 0.0) < now
            if not free and not _holder_gone(holder):
                return str(holder)
            cursor.execute(
                f"UPDATE {self._registry_table} SET lock_owner = {mark}, lock_expires = {mark} "
                f"WHERE name = {mark}",
                (owner, now + lease_seconds, name),
            )
            return None

    def unlock(self, name: str, owner: str) -> None:
        mark = self.dialect.placeholder
        with self._transaction() as cursor:
            cursor.execute(
                f"UPDATE {self._registry_table} SET lock_owner = NULL, lock_expires = NULL "
                f"WHERE name = {mark} AND lock_owner = {mark}",
                (name, owner),
            )

    def create_indexes(self, projection: Projection, slot: TrackingState) -> None:
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            for table in projection.tables:
                for statement in _index_ddl(table, self.dialect, self.physical_name(table, slot)):
                    cursor.execute(statement)

    def tracking(self) -> list[TrackingState]:
        rows = self._query(
            self._slot_statement(
                f"s.slot = (SELECT r.active_slot FROM {self._registry_table} r "
                "WHERE r.name = s.name)"
            )
            + " ORDER BY s.name"
        )
        return [_slot_of(row) for row in rows]

    def fetch(self, table: Table, key: Key, slot: TrackingState) -> EncodedRow | None:
        rows = self._query(self._statements(table, slot).fetch, key)
        return dict(zip(table.column_names, rows[0], strict=True)) if rows else None

    def _move_statement(self) -> str:
        """Compare-and-set of one slot's tracking row; it returns a row only if the position
        held and the slot is still in the state the page was computed for."""
        mark = self.dialect.placeholder
        return (
            f"UPDATE {self._slots_table} SET position = {mark}, last_error = NULL "
            f"WHERE name = {mark} AND slot = {mark} AND position = {mark} AND state = {mark} "
            "RETURNING name"
        )

    @staticmethod
    def _moves(pages: Sequence[PageCommit]) -> list[tuple[int, str, int, int, str]]:
        # In (name, slot) order, so two committers lock tracking rows alike and cannot deadlock.
        ordered = sorted(pages, key=lambda page: (page.slot.name, page.slot.slot))
        return [
            (p.new_position, p.slot.name, p.slot.slot, p.expected_position, p.slot.state)
            for p in ordered
        ]

    def _writes(self, pages: Sequence[PageCommit]) -> list[tuple[str, list[tuple[Any, ...]]]]:
        """(statement, rows) for every delete and upsert of the pages."""
        writes: list[tuple[str, list[tuple[Any, ...]]]] = []
        for page in pages:
            tables = {table.name: table for table in page.projection.tables}
            for table_name, changes in page.changes.items():
                sql = self._statements(tables[table_name], page.slot)
                deletes = [key for key, row in changes.items() if row is None]
                upserts = [tuple(row.values()) for row in changes.values() if row is not None]
                if deletes:
                    writes.append((sql.delete, deletes))
                if upserts:
                    writes.append((sql.upsert, upserts))
        return writes

    def _conflict(self, name: str, slot: int, expected: int) -> TrackingConflictError:
        mark = self.dialect.placeholder
        rows = self._query(
            self._slot_statement(f"s.name = {mark} AND s.slot = {mark}"), (name, slot)
        )
        actual = _slot_of(rows[0]).position if rows else -1
        return TrackingConflictError(name, expected, actual)

    def commit(self, pages: Sequence[PageCommit]) -> None:
        with self._transaction() as cursor:
            for new, name, slot, expected, state in self._moves(pages):
                moved = cursor.execute(self._move_statement(), (new, name, slot, expected, state))
                if moved.fetchone() is None:
                    raise self._conflict(name, slot, expected)
            for statement, rows in self._writes(pages):
                cursor.executemany(statement, rows)

    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        moves = self._moves(pages)
        # The events' insert holds the database's write lock: positions read now stay put
        # until the commit, so checking all before moving any writes nothing on a conflict.
        # Pages made with their events all move from one position to one other: one
        # statement checks them and one moves them.
        if len({(new, expected, state) for new, _, _, expected, state in moves}) == 1:
            new, _, _, expected, state = moves[0]
            slots = [(name, slot) for _, name, slot, _, _ in moves]
            match, keys = self._slots_match(slots)
            cursor.execute(
                f"SELECT COUNT(*) FROM {self._slots_table} WHERE position = "
                f"{self.dialect.placeholder} AND state = {self.dialect.placeholder} AND {match}",
                (expected, state, *keys),
            )
            if cursor.fetchone()[0] != len(slots):
                return False
            cursor.execute(
                f"UPDATE {self._slots_table} SET position = {self.dialect.placeholder}, "
                f"last_error = NULL WHERE position = {self.dialect.placeholder} "
                f"AND state = {self.dialect.placeholder} AND {match}",
                (new, expected, state, *keys),
            )
        else:
            for _, name, slot, expected, state in moves:
                match, keys = self._slots_match([(name, slot)])
                cursor.execute(
                    f"SELECT position, state FROM {self._slots_table} WHERE {match}", keys
                )
                row = cursor.fetchone()
                if row is None or (row[0], row[1]) != (expected, state):
                    return False
            for move in moves:
                cursor.execute(self._move_statement(), move)
                cursor.fetchone()
        for statement, rows in self._writes(pages):
            cursor.executemany(statement, rows)
        return True

    def _slots_match(self, slots: Sequence[tuple[str, int]]) -> tuple[str, list[Any]]:
        """A condition selecting these (name, slot) rows of the slots table, and its values."""
        mark = self.dialect.placeholder
        match = " OR ".join(f"(name = {mark} AND slot = {mark})" for _ in slots)
        return f"({match})", [value for pair in slots for value in pair]

    def record_error(self, slot: TrackingState, error: str | None) -> None:
        mark = self.dialect.placeholder
        with self._transaction() as cursor:
            cursor.execute(
                f"UPDATE {self._slots_table} SET last_error = {mark} "
                f"WHERE name = {mark} AND slot = {mark}",
                (error, slot.name, slot.slot),
            )

    def reader(self, slots: Mapping[str, TrackingState] | None = None) -> ViewReaderBase:
        return _SqlReader(self, slots or {})

    def _select_all(self, table: Table, slot: TrackingState) -> str:
        columns = ", ".join(_quote(name) for name in table.column_names)
        return f"SELECT {columns} FROM {self.dialect.table(self.physical_name(table, slot))}"

    def raw_rows(self, name: str, slot: TrackingState) -> list[EncodedRow] | None:
        physical = self.physical_name(name, slot)
        if self._kind(None, physical) != "table":
            return None
        columns = self._columns(physical)
        listed = ", ".join(_quote(column) for column in columns)
        rows = self._query(f"SELECT {listed} FROM {self.dialect.table(physical)}")
        return [dict(zip(columns, row, strict=True)) for row in rows]


class _SqlReader(ViewReaderBase):
    def __init__(self, store: SqlViewStore, slots: Mapping[str, TrackingState]) -> None:
        self._store = store
        self._slots = slots

    def _slot(self, table: Table) -> TrackingState:
        owner = self._store._owners.get(table.name)
        chosen = self._slots.get(owner) if owner is not None else None
        return chosen if chosen is not None else self._store.active_slot(table)

    def _read(
        self, table: Table, statement: Callable[[str], tuple[str, Sequence[Any]]]
    ) -> list[tuple[Any, ...]]:
        slot = self._slot(table)
        try:
            return self._store._query(*statement(self._store.physical_name(table, slot)))
        except (sqlite3.Error, psycopg.Error, PersistenceError):
            # Another process may have switched to a new slot and dropped this one: read the
            # registry again and ask the slot that is active now, once.
            if self._store._owners.get(table.name) in self._slots:
                raise
            self._store.refresh()
            now = self._slot(table)
            if now == slot:
                raise
            return self._store._query(*statement(self._store.physical_name(table, now)))

    def _get(self, table: Table, key: Key) -> EncodedRow | None:
        rows = self._read(table, lambda physical: (self._store._sql_of(table, physical).fetch, key))
        return dict(zip(table.column_names, rows[0], strict=True)) if rows else None

    def _scan(self, scan: Scan) -> Sequence[EncodedRow]:
        names = scan.table.column_names
        rows = self._read(
            scan.table, lambda physical: _scan_sql(scan, self._store.dialect, physical)
        )
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _count(self, scan: Scan) -> int:
        where, params = _conditions(scan, self._store.dialect.placeholder)
        rows = self._read(
            scan.table,
            lambda physical: (
                f"SELECT COUNT(*) FROM {self._store.dialect.table(physical)}{where}",
                params,
            ),
        )
        return int(rows[0][0])


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

    @contextmanager
    def consistent(self) -> Iterator[None]:
        # A deferred transaction on this thread's connection: every read inside it sees the
        # database as of its first read (WAL snapshot), while writers carry on.
        connection = self._connection()
        connection.execute("BEGIN")
        try:
            yield
        finally:
            connection.execute("COMMIT")

    def stream_rows(self, table: Table, slot: TrackingState) -> Iterator[tuple[Any, ...]]:
        cursor = self._connection().execute(self._select_all(table, slot))
        while batch := cursor.fetchmany(STREAM_BATCH):
            yield from batch

    def _kind(self, cursor: _Cursor | None, name: str) -> str | None:
        statement = "SELECT type FROM sqlite_master WHERE name = ?"
        rows = (
            self._query(statement, (name,))
            if cursor is None
            else cursor.execute(statement, (name,)).fetchall()
        )
        return str(rows[0][0]) if rows else None

    def _columns(self, physical: str) -> list[str]:
        return [str(row[1]) for row in self._query(f"PRAGMA table_info({_quote(physical)})")]

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()


def _moved_projection(error: BaseException) -> str | None:
    """The projection named by our 'position moved' error, or None for any other error."""
    cause = psycopg_cause(error)
    if cause is not None and cause.sqlstate == MOVED_SQLSTATE and cause.diag:
        return cause.diag.message_detail
    return None


class PostgresViewStore(SqlViewStore):
    """Views in the event log's PostgreSQL schema, through the storage's connection pool."""

    def __init__(self, datastore: PostgresDatastore) -> None:
        self.datastore = datastore
        self.dialect = postgres_dialect(datastore.schema)
        self._move_function = f"{_quote(datastore.schema)}.runledger_move_view_slots"
        self._move_call = f"SELECT {self._move_function}(%s, %s, %s, %s, %s)".encode()
        self._pinned = threading.local()
        super().__init__()
        if self._function_exists():
            return
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION {self._move_function}"
                "(p_names text[], p_slots bigint[], p_expected bigint[], p_new bigint[], "
                "p_states text[]) RETURNS void "
                "LANGUAGE plpgsql AS $$ DECLARE i integer; BEGIN "
                # One row at a time, in the given (name, slot) order: committers lock alike.
                "FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP "
                f"UPDATE {self._slots_table} SET position = p_new[i], last_error = NULL "
                "WHERE name = p_names[i] AND slot = p_slots[i] AND position = p_expected[i] "
                "AND state = p_states[i]; "
                "IF NOT FOUND THEN RAISE EXCEPTION 'projection % moved', p_names[i] "
                f"USING ERRCODE = '{MOVED_SQLSTATE}', DETAIL = p_names[i]; END IF; "
                "END LOOP; END $$"
            )

    def _function_exists(self) -> bool:
        rows = self._query(
            "SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
            "WHERE n.nspname = %s AND p.proname = 'runledger_move_view_slots'",
            (self.datastore.schema,),
        )
        return bool(rows)

    @contextmanager
    def _transaction(self) -> Iterator[_Cursor]:
        with (
            self.datastore.get_connection() as connection,
            connection.transaction(),
            connection.cursor(row_factory=tuple_row) as cursor,
        ):
            yield cursor

    def _query(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        pinned: psycopg.Connection[Any] | None = getattr(self._pinned, "connection", None)
        if pinned is not None:
            with pinned.cursor(row_factory=tuple_row) as cursor:
                cursor.execute(statement.encode(), params)
                return cursor.fetchall()
        with (
            self.datastore.get_connection() as connection,
            connection.cursor(row_factory=tuple_row) as cursor,
        ):
            cursor.execute(statement.encode(), params)
            return cursor.fetchall()

    @contextmanager
    def consistent(self) -> Iterator[None]:
        # One REPEATABLE READ transaction on one pooled connection for this thread's reads.
        with self.datastore.get_connection() as connection, connection.transaction():
            connection.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            self._pinned.connection = connection
            try:
                yield
            finally:
                self._pinned.connection = None

    def stream_rows(self, table: Table, slot: TrackingState) -> Iterator[tuple[Any, ...]]:
        pinned: psycopg.Connection[Any] | None = getattr(self._pinned, "connection", None)
        if pinned is None:
            with self.consistent():
                yield from self.stream_rows(table, slot)
            return
        # A server-side cursor: a big table is never held in this process all at once.
        with pinned.cursor(name="runledger_stream_rows", row_factory=tuple_row) as cursor:
            cursor.itersize = STREAM_BATCH
            cursor.execute(self._select_all(table, slot).encode())
            yield from cursor

    def _kind(self, cursor: _Cursor | None, name: str) -> str | None:
        statement = (
            "SELECT c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = %s"
        )
        params = (self.datastore.schema, name)
        rows = (
            self._query(statement, params)
            if cursor is None
            else cursor.execute(statement, params).fetchall()
        )
        if not rows:
            return None
        return {"r": "table", "v": "view", "i": "index"}.get(str(rows[0][0]), "other")

    def _columns(self, physical: str) -> list[str]:
        rows = self._query(
            "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
            "AND table_name = %s ORDER BY ordinal_position",
            (self.datastore.schema, physical),
        )
        return [str(row[0]) for row in rows]

    def _before_ddl(self, cursor: _Cursor) -> None:
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL's catalogue.
        cursor.execute("SELECT pg_advisory_xact_lock(%s)", (zlib.crc32(b"runledger-views"),))

    def _lock_registry(self, cursor: _Cursor, name: str) -> None:
        cursor.execute(
            f"SELECT name FROM {self._registry_table} WHERE name = %s FOR UPDATE", (name,)
        )

    def create_indexes(self, projection: Projection, slot: TrackingState) -> None:
        super().create_indexes(projection, slot)
        # After a bulk load the planner knows nothing of the new rows: without statistics it
        # may scan a whole table where an index answers in a millisecond.
        with self._transaction() as cursor:
            for table in projection.tables:
                cursor.execute(f"ANALYZE {self.dialect.table(self.physical_name(table, slot))}")

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
            page = next(page for page in pages if page.slot.name == moved)
            raise self._conflict(moved, page.slot.slot, page.expected_position) from error

    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        moves = self._moves(pages)
        if moves:
            cursor.execute(
                self._move_call,
                (
                    [name for _, name, _, _, _ in moves],
                    [slot for _, _, slot, _, _ in moves],
                    [expected for _, _, _, expected, _ in moves],
                    [new for new, _, _, _, _ in moves],
                    [state for _, _, _, _, state in moves],
                ),
            )
        for statement, rows in self._writes(pages):
            cursor.executemany(statement.encode(), rows)
        return True
