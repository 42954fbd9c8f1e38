"""What the SQLite and PostgreSQL view stores share: the registry and slot tables, the
statements generated from the projections' ``Table`` declarations, and the logic of slots,
the build lock, pages and reads.

The statements are written once, as templates, and each backend's ``Dialect`` composes them
(``{}`` takes an identifier or fragment, ``{mark}`` a parameter): plain text on SQLite,
``psycopg.sql`` on PostgreSQL. Each backend's module (``sqlite.py``, ``postgres.py``) brings
its dialect, connections, how a writer takes its lock, and its page commit. A page is one
transaction that first locks and checks every tracking row it moves, then writes all rows
with ``executemany``. Reads are single statements, without an explicit transaction.

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
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final, Generic, NamedTuple, Protocol, TypeVar

import psycopg
from eventsourcing.persistence import PersistenceError

from runledger.infrastructure.storage.log_probes import LogProbe
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
    comparable,
    decode_key,
)
from runledger.projections.base import Key, Projection, Table

REGISTRY_TABLE: Final = "runledger_view_registry"
SLOTS_TABLE: Final = "runledger_view_slots"
LEGACY_TRACKING_TABLE: Final = "runledger_projections"
"""Where views were tracked before slots: its rows are adopted as slot 0 on first open."""
STREAM_BATCH: Final = 2000
SCAN_STATEMENTS: Final = 512
"""Scan statements a store keeps, by shape, before it starts again."""
MAX_IDENTIFIER: Final = 63
"""PostgreSQL cuts longer names, so a longer index name is shortened with a hash of it."""

S = TypeVar("S")
"""A piece of SQL as a backend composes it: ``str`` for SQLite, ``psycopg.sql`` for PostgreSQL."""


def _sided(dialect: Dialect[S], alias: str, columns: Iterable[str]) -> S:
    """``alias.column, ...``: columns of one side of a join."""
    return dialect.join(", ", (dialect.sql(alias + ".{}", dialect.identifier(c)) for c in columns))


class SlotDifferences(NamedTuple):
    """How one table's rebuilt copy differs from its live copy (``compare_slots``)."""

    added: int
    removed: int
    changed: int
    keys: list[list[Any]]


class Dialect(ABC, Generic[S]):
    """How one backend composes the shared statement templates."""

    types: Mapping[str, str]
    """The column type of each ``Table`` column kind."""

    def column_type(self, kind: str) -> str:
        """How a ``CREATE TABLE`` declares a column of ``kind``: its type, and any storage
        clause the backend adds."""
        return self.types[kind]

    @abstractmethod
    def sql(self, template: str, *parts: S) -> S:
        """The template with ``{}`` filled from ``parts`` and ``{mark}`` a parameter."""

    @abstractmethod
    def identifier(self, name: str) -> S:
        """A quoted column or index name."""

    @abstractmethod
    def table(self, name: str) -> S:
        """A table reference, schema-qualified where there is a schema."""

    @abstractmethod
    def join(self, separator: str, parts: Iterable[S]) -> S:
        """The parts with the separator between them."""

    @abstractmethod
    def number(self, value: int) -> S:
        """An integer written into the statement (a ``LIMIT``)."""

    clustered: str = ""
    """What ends the ``CREATE TABLE`` of a ``Table.clustered`` table (nothing where the
    backend's tables all have their own heap)."""

    def finish(self, statement: S) -> S:
        """A statement kept and run often, in the form cheapest to send again."""
        return statement

    @abstractmethod
    def compact_text(self, column: S) -> S:
        """The text a ``compact`` column holds, for the logical views that ad-hoc SQL reads
        (``compact_text``'s forms)."""

    def same_value(self, left: S, right: S) -> S:
        """True when two stored values are the same value (NULLs alike)."""
        return self.sql("{} IS NOT DISTINCT FROM {}", left, right)

    def identifiers(self, names: Iterable[str]) -> S:
        """Quoted names, comma-separated."""
        return self.join(", ", (self.identifier(name) for name in names))

    def marks(self, count: int) -> S:
        """``count`` parameters, comma-separated."""
        return self.join(", ", (self.sql("{mark}") for _ in range(count)))


class _TableStatements(Generic[S]):
    """The statements for one table of one slot."""

    def __init__(self, table: Table, dialect: Dialect[S], physical: str) -> None:
        self.table = table
        self.physical = physical
        sql = dialect.sql
        columns = dialect.identifiers(table.column_names)
        key = dialect.identifiers(table.key)
        updates = [name for name in table.column_names if name not in table.key]
        conflict = (
            sql(
                "DO UPDATE SET {}",
                dialect.join(
                    ", ",
                    (
                        sql("{} = excluded.{}", dialect.identifier(n), dialect.identifier(n))
                        for n in updates
                    ),
                ),
            )
            if updates
            else sql("DO NOTHING")
        )
        key_match = dialect.join(
            " AND ", (sql("{} = {mark}", dialect.identifier(name)) for name in table.key)
        )
        name = dialect.table(physical)
        self.upsert = dialect.finish(
            sql(
                "INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}",
                name,
                columns,
                dialect.marks(len(table.column_names)),
                key,
                conflict,
            )
        )
        self.delete = dialect.finish(sql("DELETE FROM {} WHERE {}", name, key_match))
        self.fetch = dialect.finish(sql("SELECT {} FROM {} WHERE {}", columns, name, key_match))
        self._dialect = dialect
        self._name = name
        self._key_match = key_match
        self._updates: dict[tuple[str, ...], S] = {}

    def statement(self, kind: str, changed: tuple[str, ...]) -> S:
        """The statement of one row's write of ``kind`` (``_write_plan``)."""
        if kind == "delete":
            return self.delete
        if kind == "upsert":
            return self.upsert
        return self.update(changed)

    def update(self, columns: tuple[str, ...]) -> S:
        """The ``UPDATE`` of these columns of the row with a given key (values, then key)."""
        statement = self._updates.get(columns)
        if statement is None:
            sql, dialect = self._dialect.sql, self._dialect
            assignments = dialect.join(
                ", ", (sql("{} = {mark}", dialect.identifier(name)) for name in columns)
            )
            statement = self._updates[columns] = dialect.finish(
                sql("UPDATE {} SET {} WHERE {}", self._name, assignments, self._key_match)
            )
        return statement


def _table_ddl(table: Table, dialect: Dialect[S], physical: str) -> S:
    """The ``CREATE TABLE`` of one slot's table."""
    columns = dialect.join(
        ", ",
        (
            dialect.sql("{} {}", dialect.identifier(name), dialect.sql(dialect.column_type(kind)))
            for name, kind in table.columns
        ),
    )
    return dialect.sql(
        "CREATE TABLE IF NOT EXISTS {} ({}, PRIMARY KEY ({})){}",
        dialect.table(physical),
        columns,
        dialect.identifiers(table.key),
        dialect.sql(dialect.clustered if table.clustered else ""),
    )


def _same(value: Any, old: Any) -> bool:
    """Whether a column's value is stored alike: ``1 == 1.0 == True`` in Python, not in a row."""
    return type(value) is type(old) and value == old


def _index_name(physical: str, index: tuple[str, ...]) -> str:
    """The name of one index of one slot's table, within PostgreSQL's identifier length."""
    name = physical + "_" + "_".join(index) + "_idx"
    if len(name) <= MAX_IDENTIFIER:
        return name
    return f"{physical[: MAX_IDENTIFIER - 14]}_{zlib.crc32(name.encode()):08x}_idx"


def _index_ddl(table: Table, dialect: Dialect[S], physical: str) -> list[S]:
    """The ``CREATE INDEX`` statements of one slot's table."""
    return [
        dialect.sql(
            "CREATE INDEX IF NOT EXISTS {} ON {} ({})",
            dialect.identifier(_index_name(physical, index)),
            dialect.table(physical),
            dialect.identifiers(index),
        )
        for index in table.indexes
    ]


def _dropped_index_names(table: Table, physical: str) -> list[str]:
    """The names the indexes ``table`` no longer declares had on one slot's table."""
    return [_index_name(physical, index) for index in table.dropped_indexes]


def _conditions(scan: Scan, dialect: Dialect[S]) -> S:
    """The scan's WHERE clause (empty without conditions), for ``_scan_params``."""
    sql = dialect.sql
    conditions: list[S] = []
    for name in scan.equals:
        conditions.append(sql("{} = {mark}", dialect.identifier(name)))
    for name, values in scan.within.items():
        if not values:
            conditions.append(sql("1 = 0"))
            continue
        conditions.append(sql("{} IN ({})", dialect.identifier(name), dialect.marks(len(values))))
    if scan.order_by is not None and scan.after is not None:
        comparison = "{} < {mark}" if scan.descending else "{} > {mark}"
        conditions.append(sql(comparison, dialect.identifier(scan.order_by)))
    if not conditions:
        return sql("")
    return sql(" WHERE {}", dialect.join(" AND ", conditions))


def _scan_params(scan: Scan) -> list[Any]:
    """The parameters of the scan's WHERE clause, in its order."""
    params = list(scan.equals.values())
    for values in scan.within.values():
        params.extend(values)
    if scan.order_by is not None and scan.after is not None:
        params.append(scan.after)
    return params


def _scan_sql(scan: Scan, dialect: Dialect[S], physical: str) -> S:
    sql = dialect.sql
    parts = [
        sql(
            "SELECT {} FROM {}{}",
            dialect.identifiers(scan.table.column_names),
            dialect.table(physical),
            _conditions(scan, dialect),
        )
    ]
    if scan.order_by is not None:
        order = " ORDER BY {} DESC" if scan.descending else " ORDER BY {} ASC"
        parts.append(sql(order, dialect.identifier(scan.order_by)))
    if scan.limit is not None:
        parts.append(sql(" LIMIT {}", dialect.number(int(scan.limit))))
    return dialect.join("", parts)


def _count_sql(scan: Scan, dialect: Dialect[S], physical: str) -> S:
    return dialect.sql(
        "SELECT COUNT(*) FROM {}{}", dialect.table(physical), _conditions(scan, dialect)
    )


def _scan_shape(scan: Scan, physical: str) -> tuple[Any, ...]:
    """What a scan's statement depends on (not its values)."""
    return (
        physical,
        tuple(scan.equals),
        tuple((name, len(values)) for name, values in scan.within.items()),
        scan.order_by,
        scan.descending,
        scan.after is not None,
        scan.limit,
    )


class Cursor(Protocol):
    """What both sqlite3 and psycopg give: statements and tuple rows."""

    def execute(self, statement: Any, params: Any = ..., /) -> Any: ...

    def executemany(self, statement: Any, params: Any, /) -> Any: ...


_SLOT_COLUMNS: Final = "s.name, s.version, s.position, s.last_error, s.slot, s.state, s.tables"


def _slot_of(row: Sequence[Any]) -> TrackingState:
    """A slot's tracking state from its row of the slots table."""
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


class SqlViewStore(ViewStore, Generic[S]):
    """The view store logic both SQL backends share."""

    dialect: Dialect[S]

    def __init__(self) -> None:
        super().__init__()
        self._probing = threading.local()
        self._sql: dict[str, _TableStatements[S]] = {}
        self._scans: dict[tuple[Any, ...], S] = {}
        self._declared: dict[tuple[str, int], Table] = {}
        """Logical table name and version -> the table this code declares for them."""
        self._registry_table = self.dialect.table(REGISTRY_TABLE)
        self._slots_table = self.dialect.table(SLOTS_TABLE)
        # Composed once: the projector reads the registry and the tracking between pages.
        self._registry_statement = self.dialect.finish(
            self.dialect.sql(
                "SELECT active_slot, building_slot, lock_owner, lock_expires "
                "FROM {} WHERE name = {mark}",
                self._registry_table,
            )
        )
        self._slots_statement = self.dialect.finish(self._slot_statement("s.name = {mark}"))
        self._tracking_statement = self.dialect.finish(
            self.dialect.sql(
                "SELECT " + _SLOT_COLUMNS + " FROM {} s WHERE s.slot = "
                "(SELECT r.active_slot FROM {} r WHERE r.name = s.name) ORDER BY s.name",
                self._slots_table,
                self._registry_table,
            )
        )
        if self._exists(REGISTRY_TABLE) and self._exists(SLOTS_TABLE):
            return
        sql = self.dialect.sql
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            cursor.execute(
                sql(
                    "CREATE TABLE IF NOT EXISTS {} (name TEXT PRIMARY KEY, "
                    "active_slot INTEGER, building_slot INTEGER, next_slot INTEGER NOT NULL, "
                    "lock_owner TEXT, lock_expires {})",
                    self._registry_table,
                    sql(self.dialect.types["real"]),
                )
            )
            cursor.execute(
                sql(
                    "CREATE TABLE IF NOT EXISTS {} (name TEXT NOT NULL, "
                    "slot INTEGER NOT NULL, version INTEGER NOT NULL, position BIGINT NOT NULL, "
                    "last_error TEXT, state TEXT NOT NULL, tables TEXT NOT NULL, "
                    "PRIMARY KEY (name, slot))",
                    self._slots_table,
                )
            )

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Cursor]:
        """One write transaction, with whatever lock the backend needs to check positions."""

    @abstractmethod
    def _query(self, statement: S, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """One read statement's rows; the first one inside ``probing`` carries its probe
        (``_take_probe``)."""

    @contextmanager
    def probing(self, probe: LogProbe) -> Iterator[None]:
        self._probing.probe = probe
        try:
            yield
        finally:
            self._probing.probe = None

    def moved(self, probe: LogProbe) -> bool:
        if probe.found is None:
            probe.found = bool(self._query(probe.statement, probe.params))
        return probe.found

    def _take_probe(self) -> LogProbe | None:
        """The probe this thread's next read is to carry, if any (once)."""
        probe: LogProbe | None = getattr(self._probing, "probe", None)
        if probe is not None:
            self._probing.probe = None
        return probe

    @abstractmethod
    def _kinds(self, cursor: Cursor | None, names: Sequence[str]) -> dict[str, str]:
        """``table``, ``view`` or ``index`` (``other`` for anything else) of each of ``names``
        that exists, in one read: opening a store looks for every table and index of every
        projection, one round trip each was most of a PostgreSQL open."""

    def _kind(self, cursor: Cursor | None, name: str) -> str | None:
        """``table``, ``view`` (or ``index``) if an object of this name exists, else None."""
        return self._kinds(cursor, [name]).get(name)

    @abstractmethod
    def _columns(self, physical: str) -> list[str]:
        """The column names of a physical table, in order."""

    def _before_ddl(self, cursor: Cursor) -> None:
        """Serialise schema changes where concurrent DDL can collide (PostgreSQL)."""

    def _lock_registry(self, cursor: Cursor, name: str) -> None:
        """Lock the projection's registry row until the transaction ends (PostgreSQL)."""

    def _exists(self, name: str) -> bool:
        return self._kind(None, name) is not None

    def _statements(self, table: Table, slot: TrackingState) -> _TableStatements[S]:
        return self._sql_of(table, self.physical_name(table, slot))

    def _sql_of(self, table: Table, physical: str) -> _TableStatements[S]:
        statements = self._sql.get(physical)
        if statements is None:
            statements = self._sql[physical] = _TableStatements(table, self.dialect, physical)
        return statements

    def _scan_statement(
        self, compose: Callable[[Scan, Dialect[S], str], S], scan: Scan, physical: str
    ) -> S:
        # Kept by shape: composing a scan's statement costs more than a small read.
        shape = (compose, *_scan_shape(scan, physical))
        statement = self._scans.get(shape)
        if statement is None:
            if len(self._scans) >= SCAN_STATEMENTS:
                self._scans.clear()
            statement = self._scans[shape] = self.dialect.finish(
                compose(scan, self.dialect, physical)
            )
        return statement

    # -- registry ---------------------------------------------------------------------------

    def _slot_statement(self, where: str) -> S:
        return self.dialect.sql(
            "SELECT " + _SLOT_COLUMNS + " FROM {} s WHERE " + where, self._slots_table
        )

    def _read_registry(self, cursor: Cursor | None, name: str) -> Registry:
        statement, slots_statement = self._registry_statement, self._slots_statement
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
        names = [
            name
            for table in projection.tables
            for physical in (self.physical_name(table, slot),)
            for name in (physical, *(_index_name(physical, index) for index in table.indexes))
        ]
        return len(self._kinds(None, names)) == len(set(names))

    def _create_tables(
        self, cursor: Cursor, projection: Projection, slot: TrackingState, *, indexes: bool
    ) -> None:
        for table in projection.tables:
            physical = self.physical_name(table, slot)
            cursor.execute(_table_ddl(table, self.dialect, physical))
            if indexes:
                for statement in _index_ddl(table, self.dialect, physical):
                    cursor.execute(statement)

    def _insert_slot(self, cursor: Cursor, slot: TrackingState) -> None:
        cursor.execute(
            self.dialect.sql(
                "INSERT INTO {} (name, slot, version, position, last_error, state, tables) "
                "VALUES ({})",
                self._slots_table,
                self.dialect.marks(7),
            ),
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

    def _new_slot(self, cursor: Cursor, projection: Projection, state: str) -> TrackingState:
        [(number,)] = cursor.execute(
            self.dialect.sql(
                "UPDATE {} SET next_slot = next_slot + 1 "
                "WHERE name = {mark} RETURNING next_slot - 1",
                self._registry_table,
            ),
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

    def _legacy_slot(self, cursor: Cursor, projection: Projection) -> TrackingState | None:
        """The projection's tables as written before slots existed, adopted as slot 0."""
        if self._kind(cursor, LEGACY_TRACKING_TABLE) != "table":
            return None
        if any(self._kind(cursor, table.name) != "table" for table in projection.tables):
            return None
        rows = cursor.execute(
            self.dialect.sql(
                "SELECT version, position, last_error FROM {} WHERE name = {mark}",
                self.dialect.table(LEGACY_TRACKING_TABLE),
            ),
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

    def _point_views(self, cursor: Cursor, active: TrackingState) -> None:
        """Make each logical table name a view onto the active slot, where the name is free."""
        if active.slot == LEGACY_SLOT:
            return
        sql, table = self.dialect.sql, self.dialect.table
        for name in active.tables:
            if self._kind(cursor, name) == "table":
                continue  # a table from before slots: it keeps the name until it is dropped
            cursor.execute(sql("DROP VIEW IF EXISTS {}", table(name)))
            cursor.execute(
                sql(
                    "CREATE VIEW {} AS SELECT {} FROM {}",
                    table(name),
                    self._view_columns(self._declared.get((name, active.version))),
                    table(self.physical_name(name, active)),
                )
            )

    def _view_columns(self, declared: Table | None) -> S:
        """What a logical view selects: a compact column as the text it holds, where the
        backend can say it in SQL and this code declares the slot's version."""
        d = self.dialect
        if declared is None or not declared.compact_columns:
            return d.sql("*")
        return d.join(
            ", ",
            (
                d.sql("{} AS {}", d.compact_text(d.identifier(name)), d.identifier(name))
                if name in declared.compact_columns
                else d.identifier(name)
                for name in declared.column_names
            ),
        )

    def _declare(self, projection: Projection) -> None:
        """Remember the tables this code declares for the projection's version."""
        for table in projection.tables:
            self._declared[(table.name, projection.version)] = table

    def _register(self, cursor: Cursor, name: str) -> None:
        """The projection's registry row, inserted if it is missing."""
        cursor.execute(
            self.dialect.sql(
                "INSERT INTO {} (name, next_slot) VALUES ({mark}, 1) ON CONFLICT (name) DO NOTHING",
                self._registry_table,
            ),
            (name,),
        )

    def ensure(self, projection: Projection) -> TrackingState:
        # Checked first, so opening a store never takes table locks (DDL, even IF NOT
        # EXISTS, locks the table) while other processes write views, unless something is
        # missing.
        self._declare(projection)
        active = self.registry(projection.name).active
        if active is not None and (
            active.version != projection.version or self._complete(projection, active)
        ):
            self._drop_retired_indexes(projection, active)
            self._known(projection, active)
            return active
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            self._register(cursor, projection.name)
            self._lock_registry(cursor, projection.name)
            active = self._read_registry(cursor, projection.name).active
            if active is None:
                active = self._legacy_slot(cursor, projection)
                if active is not None:
                    self._insert_slot(cursor, active)
                else:
                    active = self._new_slot(cursor, projection, "active")
                cursor.execute(
                    self.dialect.sql(
                        "UPDATE {} SET active_slot = {mark} WHERE name = {mark}",
                        self._registry_table,
                    ),
                    (active.slot, projection.name),
                )
            if active.version == projection.version:
                self._create_tables(cursor, projection, active, indexes=True)
            self._point_views(cursor, active)
        self._drop_retired_indexes(projection, active)
        self._known(projection, active)
        return active

    def _drop_retired_indexes(self, projection: Projection, slot: TrackingState) -> None:
        """Drop the indexes an earlier release made on the slot's tables that no query needs
        now: each costs a page or more of every commit that writes its table. Looked for
        first, so an open takes no schema lock once they are gone."""
        retired = [
            name
            for table in projection.tables
            if table.name in slot.tables
            for name in _dropped_index_names(table, self.physical_name(table, slot))
        ]
        kinds = self._kinds(None, retired) if retired else {}
        names = [name for name in retired if kinds.get(name) == "index"]
        if not names:
            return
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            for name in names:
                cursor.execute(
                    self.dialect.sql("DROP INDEX IF EXISTS {}", self.dialect.table(name))
                )

    def begin_build(self, projection: Projection, *, restart: bool = False) -> TrackingState:
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
                self.dialect.sql(
                    "UPDATE {} SET building_slot = {mark} WHERE name = {mark}",
                    self._registry_table,
                ),
                (slot.slot, projection.name),
            )
            return slot

    def switch(self, projection: Projection, building: TrackingState) -> TrackingState | None:
        sql = self.dialect.sql
        self._declare(projection)
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
                    sql(
                        "UPDATE {} SET state = 'retired' WHERE name = {mark} AND slot = {mark}",
                        self._slots_table,
                    ),
                    (projection.name, retired.slot),
                )
            cursor.execute(
                sql(
                    "UPDATE {} SET state = 'active' WHERE name = {mark} AND slot = {mark}",
                    self._slots_table,
                ),
                (projection.name, building.slot),
            )
            cursor.execute(
                sql(
                    "UPDATE {} SET active_slot = {mark}, building_slot = NULL WHERE name = {mark}",
                    self._registry_table,
                ),
                (building.slot, projection.name),
            )
            active = dataclasses.replace(registry.building, state="active")
            self._point_views(cursor, active)
        self._known(projection, active)
        return retired

    def _drop_tables(self, cursor: Cursor, slot: TrackingState) -> None:
        sql = self.dialect.sql
        for name in slot.tables:
            cursor.execute(
                sql("DROP TABLE IF EXISTS {}", self.dialect.table(self.physical_name(name, slot)))
            )
        cursor.execute(
            sql("DELETE FROM {} WHERE name = {mark} AND slot = {mark}", self._slots_table),
            (slot.name, slot.slot),
        )
        cursor.execute(
            sql(
                "UPDATE {} SET building_slot = NULL WHERE name = {mark} AND building_slot = {mark}",
                self._registry_table,
            ),
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
        rows = self._query(
            self._slot_statement("s.name = {mark} AND s.state = 'retired' ORDER BY s.slot"),
            (name,),
        )
        return [_slot_of(row) for row in rows]

    def try_lock(self, name: str, owner: str, *, lease_seconds: float) -> str | None:
        sql = self.dialect.sql
        with self._transaction() as cursor:
            self._register(cursor, name)
            self._lock_registry(cursor, name)
            [(holder, expires)] = cursor.execute(
                sql(
                    "SELECT lock_owner, lock_expires FROM {} WHERE name = {mark}",
                    self._registry_table,
                ),
                (name,),
            ).fetchall()
            now = time.time()
            free = holder is None or holder == owner or (expires or 0.0) < now
            if not free and not _holder_gone(holder):
                return str(holder)
            cursor.execute(
                sql(
                    "UPDATE {} SET lock_owner = {mark}, lock_expires = {mark} WHERE name = {mark}",
                    self._registry_table,
                ),
                (owner, now + lease_seconds, name),
            )
            return None

    def unlock(self, name: str, owner: str) -> None:
        with self._transaction() as cursor:
            cursor.execute(
                self.dialect.sql(
                    "UPDATE {} SET lock_owner = NULL, lock_expires = NULL "
                    "WHERE name = {mark} AND lock_owner = {mark}",
                    self._registry_table,
                ),
                (name, owner),
            )

    def create_indexes(self, projection: Projection, slot: TrackingState) -> None:
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            for table in projection.tables:
                for statement in _index_ddl(table, self.dialect, self.physical_name(table, slot)):
                    cursor.execute(statement)

    def tracking(self) -> list[TrackingState]:
        return [_slot_of(row) for row in self._query(self._tracking_statement)]

    def fetch(self, table: Table, key: Key, slot: TrackingState) -> EncodedRow | None:
        rows = self._query(self._statements(table, slot).fetch, key)
        return dict(zip(table.column_names, rows[0], strict=True)) if rows else None

    @staticmethod
    def _moves(pages: Sequence[PageCommit]) -> list[tuple[int, str, int, int, str]]:
        # In (name, slot) order, so two committers lock tracking rows alike and cannot deadlock.
        ordered = sorted(pages, key=lambda page: (page.slot.name, page.slot.slot))
        return [
            (p.new_position, p.slot.name, p.slot.slot, p.expected_position, p.slot.state)
            for p in ordered
        ]

    def _writes(self, pages: Sequence[PageCommit]) -> list[tuple[S, list[tuple[Any, ...]]]]:
        """(statement, rows) for every delete and upsert of the pages."""
        return [
            (statements.statement(kind, changed), rows)
            for statements, kind, changed, rows in self._write_plan(pages)
        ]

    def _write_plan(
        self, pages: Sequence[PageCommit]
    ) -> list[tuple[_TableStatements[S], str, tuple[str, ...], list[tuple[Any, ...]]]]:
        """(table's statements, "delete" | "upsert" | "update", changed columns, rows) for
        every write of the pages, in the order they are made."""
        writes: list[tuple[_TableStatements[S], str, tuple[str, ...], list[tuple[Any, ...]]]] = []
        for page in pages:
            tables = {table.name: table for table in page.projection.tables}
            for table_name, changes in page.changes.items():
                statements = self._statements(tables[table_name], page.slot)
                previous = page.previous.get(table_name, {}) if self.partial_updates else {}
                deletes = [key for key, row in changes.items() if row is None]
                upserts: list[tuple[Any, ...]] = []
                updates: dict[tuple[str, ...], list[tuple[Any, ...]]] = {}
                for key, row in changes.items():
                    if row is None:
                        continue
                    old = previous.get(key)
                    if old is None:
                        upserts.append(tuple(row.values()))
                        continue
                    changed = tuple(
                        name for name, value in row.items() if not _same(value, old[name])
                    )
                    if changed:
                        updates.setdefault(changed, []).append(
                            (*(row[name] for name in changed), *key)
                        )
                if deletes:
                    writes.append((statements, "delete", (), deletes))
                if upserts:
                    writes.append((statements, "upsert", (), upserts))
                for changed, rows in updates.items():
                    writes.append((statements, "update", changed, rows))
        return writes

    def _conflict(self, name: str, slot: int, expected: int) -> TrackingConflictError:
        rows = self._query(
            self._slot_statement("s.name = {mark} AND s.slot = {mark}"), (name, slot)
        )
        actual = _slot_of(rows[0]).position if rows else -1
        return TrackingConflictError(name, expected, actual)

    def record_error(self, slot: TrackingState, error: str | None) -> None:
        with self._transaction() as cursor:
            cursor.execute(
                self.dialect.sql(
                    "UPDATE {} SET last_error = {mark} WHERE name = {mark} AND slot = {mark}",
                    self._slots_table,
                ),
                (error, slot.name, slot.slot),
            )

    def reader(self, slots: Mapping[str, TrackingState] | None = None) -> ViewReaderBase:
        return _SqlReader(self, slots or {})

    def _select_all(self, table: Table, slot: TrackingState) -> S:
        return self.dialect.sql(
            "SELECT {} FROM {}",
            self.dialect.identifiers(table.column_names),
            self.dialect.table(self.physical_name(table, slot)),
        )

    def compare_slots(
        self, table: Table, live: TrackingState, rebuilt: TrackingState, limit: int
    ) -> SlotDifferences:
        """Two slots' copies of ``table`` compared by the database itself (call it inside
        ``consistent()``): rows the rebuilt copy adds, lacks and changes, and the keys of up
        to ``limit`` of them, added or changed first. Comparing in Python read every row of
        both copies, hashed each and kept the hashes in a temporary file: a third of a
        blue/green rebuild's time."""
        d = self.dialect
        rebuilt_table = d.table(self.physical_name(table, rebuilt))
        live_table = d.table(self.physical_name(table, live))
        keys = d.join(
            " AND ",
            (d.sql("r.{} = l.{}", d.identifier(c), d.identifier(c)) for c in table.key),
        )
        # Packed values are compared by the JSON they hold, in Python (``_repacked``): the
        # same row packed by another zstd release may be other bytes.
        values = [
            c for c in table.column_names if c not in table.key and c not in table.packed_columns
        ]
        same = self._all_same(values)
        # One pass over the rebuilt copy joined to the live one gives what it adds and
        # changes; what it lacks is the live rows it did not match (keys are unique). Three
        # passes (one NOT EXISTS each way, one join) took 0.09 s of a 0.8 s blue/green
        # rebuild at 30k events on SQLite.
        unmatched = d.sql("l.{} IS NULL", d.identifier(table.key[0]))
        # The same pass counts the rows whose packed bytes alone differ, so that only a
        # table with some reads them (a second join took 4 % of a blue/green rebuild of the
        # viewer deltas, whose bytes, packed by the same zstd, never differed).
        packed = sorted(table.packed_columns)
        repacked_count = (
            d.sql(
                "COALESCE(SUM(CASE WHEN NOT {} AND {} AND NOT ({}) THEN 1 ELSE 0 END), 0)",
                unmatched,
                same,
                self._all_same(packed),
            )
            if packed
            else d.sql("0")
        )
        counts = d.sql(
            "SELECT COUNT(*), "
            "COALESCE(SUM(CASE WHEN {} THEN 1 ELSE 0 END), 0), "
            "COALESCE(SUM(CASE WHEN NOT {} AND NOT ({}) THEN 1 ELSE 0 END), 0), "
            "{}, "
            "(SELECT COUNT(*) FROM {}) "
            "FROM {} r LEFT JOIN {} l ON {}",
            unmatched,
            unmatched,
            same,
            repacked_count,
            live_table,
            rebuilt_table,
            live_table,
            keys,
        )
        ((rebuilt_rows, added, changed, bytes_differ, live_rows),) = self._query(counts)
        removed = live_rows - (rebuilt_rows - added)
        repacked = (
            self._repacked(table, packed, rebuilt_table, live_table, keys, same)
            if bytes_differ
            else []
        )
        changed += len(repacked)
        found: list[list[Any]] = repacked[:limit]
        if (added or changed > len(repacked)) and len(found) < limit:
            statement = d.sql(
                "SELECT {} FROM {} r LEFT JOIN {} l ON {} WHERE l.{} IS NULL OR NOT ({}) LIMIT {}",
                _sided(d, "r", table.key),
                rebuilt_table,
                live_table,
                keys,
                d.identifier(table.key[0]),
                same,
                d.number(limit - len(found)),
            )
            found += [list(row) for row in self._query(statement)]
        if removed and len(found) < limit:
            statement = d.sql(
                "SELECT {} FROM {} l WHERE NOT EXISTS (SELECT 1 FROM {} r WHERE {}) LIMIT {}",
                _sided(d, "l", table.key),
                live_table,
                rebuilt_table,
                keys,
                d.number(limit - len(found)),
            )
            found += [list(row) for row in self._query(statement)]
        return SlotDifferences(
            int(added), int(removed), int(changed), [decode_key(table, key) for key in found]
        )

    def _all_same(self, columns: Sequence[str]) -> S:
        """True where the rebuilt (``r``) and live (``l``) rows hold the same ``columns``."""
        d = self.dialect
        if not columns:
            return d.sql("1 = 1")
        return d.join(
            " AND ",
            (
                d.same_value(d.sql("r.{}", d.identifier(c)), d.sql("l.{}", d.identifier(c)))
                for c in columns
            ),
        )

    def _repacked(
        self, table: Table, packed: Sequence[str], rebuilt: S, live: S, keys: S, same: S
    ) -> list[list[Any]]:
        """The keys of rows that are the same in both copies but for their ``packed`` values,
        whose bytes differ and whose JSON does too."""
        d = self.dialect
        statement = d.sql(
            "SELECT {}, {}, {} FROM {} r JOIN {} l ON {} WHERE {} AND NOT ({})",
            _sided(d, "r", table.key),
            _sided(d, "r", packed),
            _sided(d, "l", packed),
            rebuilt,
            live,
            keys,
            same,
            self._all_same(packed),
        )
        width = len(table.key)
        return [
            list(row[:width])
            for row in self._query(statement)
            if [comparable(value) for value in row[width : width + len(packed)]]
            != [comparable(value) for value in row[width + len(packed) :]]
        ]

    def raw_rows(self, name: str, slot: TrackingState) -> list[EncodedRow] | None:
        physical = self.physical_name(name, slot)
        if self._kind(None, physical) != "table":
            return None
        columns = self._columns(physical)
        rows = self._query(
            self.dialect.sql(
                "SELECT {} FROM {}", self.dialect.identifiers(columns), self.dialect.table(physical)
            )
        )
        return [dict(zip(columns, row, strict=True)) for row in rows]


class _SqlReader(ViewReaderBase, Generic[S]):
    def __init__(self, store: SqlViewStore[S], slots: Mapping[str, TrackingState]) -> None:
        self._store = store
        self._slots = slots

    def _slot(self, table: Table) -> TrackingState:
        owner = self._store._owners.get(table.name)
        chosen = self._slots.get(owner) if owner is not None else None
        return chosen if chosen is not None else self._store.active_slot(table)

    def _read(
        self, table: Table, statement: Callable[[str], tuple[S, Sequence[Any]]]
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
        params = _scan_params(scan)
        rows = self._read(
            scan.table,
            lambda physical: (self._store._scan_statement(_scan_sql, scan, physical), params),
        )
        return [dict(zip(names, row, strict=True)) for row in rows]

    def _count(self, scan: Scan) -> int:
        params = _scan_params(scan)
        rows = self._read(
            scan.table,
            lambda physical: (self._store._scan_statement(_count_sql, scan, physical), params),
        )
        return int(rows[0][0])
