"""Views in the SQLite file of the event log: its dialect, connections and page commits."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

from runledger.infrastructure.databases import create_private_file
from runledger.infrastructure.views import compact_text as forms
from runledger.infrastructure.views.sql import Cursor, Dialect, SqlViewStore
from runledger.infrastructure.views.store import PageCommit, PageCommits, TrackingState
from runledger.infrastructure.views.wal_checkpoints import checkpointed_commits
from runledger.projections.base import Table


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


_TYPES: Final = {
    "text": "TEXT",
    "int": "INTEGER",
    "bool": "INTEGER",
    "json": "TEXT",
    "packed": "BLOB",
    "compact": "BLOB",
    "real": "REAL",
}


class SQLiteDialect(Dialect[str]):
    """SQLite statements as text, with ``?`` parameters."""

    types = _TYPES
    clustered = " WITHOUT ROWID"

    def sql(self, template: str, *parts: str) -> str:
        return template.format(*parts, mark="?")

    def identifier(self, name: str) -> str:
        return _quote(name)

    def table(self, name: str) -> str:
        return _quote(name)

    def join(self, separator: str, parts: Iterable[str]) -> str:
        return separator.join(parts)

    def number(self, value: int) -> str:
        return str(int(value))

    def compact_text(self, column: str) -> str:
        # SQLite's SQL has no function from bytes to an integer: the microseconds are summed
        # from the hex digits (two's complement, as SQLite's 64-bit shifts wrap). Bytes of no
        # form are shown as they are.
        digits = " + ".join(
            f"((instr('0123456789ABCDEF', substr(hex(substr({column}, 2, 8)), {k}, 1)) - 1)"
            f" << {4 * (16 - k)})"
            for k in range(1, 17)
        )
        micros = f"({digits})"
        fraction = f"((({micros} % 1000000) + 1000000) % 1000000)"
        prefixes = " ".join(
            f"WHEN '{number:02X}' THEN '{prefix}'" for number, prefix in enumerate(forms.PREFIXES)
        )
        numbers = ", ".join(f"'{number:02X}'" for number in range(len(forms.PREFIXES)))
        marker = f"substr({column}, 1, 1)"
        return (
            f"CASE WHEN typeof({column}) != 'blob' OR length({column}) = 0 THEN {column} "
            f"WHEN {marker} = X'{forms.TEXT:02X}' THEN CAST(substr({column}, 2) AS TEXT) "
            f"WHEN {marker} = X'{forms.TIME:02X}' AND length({column}) = 9 "
            f"AND {micros} BETWEEN {forms.FIRST_MICROS} AND {forms.LAST_MICROS} THEN "
            f"strftime('%Y-%m-%dT%H:%M:%S', ({micros} - {fraction}) / 1000000, 'unixepoch') "
            f"|| CASE WHEN {fraction} = 0 THEN '' ELSE '.' || printf('%06d', {fraction}) END "
            "|| '+00:00' "
            f"WHEN {marker} = X'{forms.HEX:02X}' AND length({column}) >= 3 "
            f"AND hex(substr({column}, 2, 1)) IN ({numbers}) THEN "
            f"(CASE hex(substr({column}, 2, 1)) {prefixes} END) "
            f"|| lower(hex(substr({column}, 3))) "
            f"ELSE {column} END"
        )

    def same_value(self, left: str, right: str) -> str:
        # A column's affinity lets a text or a real stand where an integer was written: the
        # same value of another type is a different row, as a digest would say.
        return f"({left} IS {right} AND typeof({left}) = typeof({right}))"


SQLITE: Final = SQLiteDialect()


def _rowcount(cursor: Any) -> int:
    """The rows the cursor's last statement changed (eventsourcing's cursor wraps sqlite3's)."""
    count: int = getattr(cursor, "sqlite_cursor", cursor).rowcount
    return count


VIEW_CACHE_KIB: Final = 4096
"""Page cache of each read-model connection (see ``SQLiteViewStore._connection``)."""
VIEW_AUTOCHECKPOINT: Final = 10_000
"""WAL pages after which a read-model commit checkpoints (see ``SQLiteViewStore._connection``;
a build's are left to a thread, ``views.wal_checkpoints``)."""


class SQLiteViewStore(SqlViewStore[str]):
    """Views in the SQLite file of the event log; one connection per thread."""

    dialect = SQLITE
    partial_updates = True

    def __init__(self, path: str, *, busy_timeout: float = 30.0) -> None:
        self.path = path
        create_private_file(path)
        self.busy_timeout = busy_timeout
        self._local = threading.local()
        self._connections: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        super().__init__()
        # Compare-and-set of one slot's tracking row; it returns a row only if the position
        # held and the slot is still in the state the page was computed for.
        self._move_statement = (
            f"UPDATE {self._slots_table} SET position = ?, last_error = NULL "
            "WHERE name = ? AND slot = ? AND position = ? AND state = ? RETURNING name"
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
            # A view commit need not reach the disk at once: WAL keeps the file consistent,
            # and a page lost to a power cut is replayed from the event log.
            connection.execute("PRAGMA synchronous=NORMAL")
            # Fewer WAL checkpoints (each copies the log into the file and syncs it) make
            # page commits cheaper. The cache is small: a rebuild holds several connections,
            # each cache fills as the tables outgrow it, and at 64 MiB each a blue/green
            # rebuild's peak RSS grew with history (144 MB at 100k events, 178 MB at 1M);
            # at 4 MiB it is 76 and 81 MB, and a rebuild takes the same CPU (3.8-4.1 s at
            # 100k either way).
            connection.execute(f"PRAGMA cache_size=-{VIEW_CACHE_KIB}")
            connection.execute(f"PRAGMA wal_autocheckpoint={VIEW_AUTOCHECKPOINT}")
            self._local.connection = connection
            with self._lock:
                self._connections.append(connection)
        return connection

    @contextmanager
    def _transaction(self) -> Iterator[Cursor]:
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
        connection = self._connection()
        rows = connection.execute(statement, params).fetchall()
        probe = self._take_probe()
        if probe is not None:
            # After the read on the same connection: no round trip to save here, but the
            # catch-up's machinery (a pooled transaction, the projector, its telemetry) was
            # half of a one-follow-up page read.
            probe.settle(connection.execute(probe.statement, probe.params).fetchall())
        return rows

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
        # Row by row: a batch of a table of large rows (a run's viewer row of thousands of
        # follow-ups) held ~10 MB at once, more as history grows.
        yield from self._connection().execute(self._select_all(table, slot))

    def _kinds(self, cursor: Cursor | None, names: Sequence[str]) -> dict[str, str]:
        params = tuple(names)
        statement = (
            f"SELECT name, type FROM sqlite_master WHERE name IN ({', '.join('?' * len(params))})"
        )
        rows = (
            self._query(statement, params)
            if cursor is None
            else cursor.execute(statement, params).fetchall()
        )
        kinds = {"table", "view", "index"}
        return {str(name): str(kind) if kind in kinds else "other" for name, kind in rows}

    def _columns(self, physical: str) -> list[str]:
        return [str(row[1]) for row in self._query(f"PRAGMA table_info({_quote(physical)})")]

    def commit(self, pages: Sequence[PageCommit]) -> None:
        with self._transaction() as cursor:
            for new, name, slot, expected, state in self._moves(pages):
                moved = cursor.execute(self._move_statement, (new, name, slot, expected, state))
                if moved.fetchone() is None:
                    raise self._conflict(name, slot, expected)
            for statement, rows in self._writes(pages):
                cursor.executemany(statement, rows)

    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        moves = self._moves(pages)
        # The events' insert holds the database's write lock: positions read now stay put
        # until the commit. Pages made with their events all move from one position to one
        # other: one statement moves every slot still there, and how many it moved checks
        # them (a statement fewer on every command than a count first). A conflict may
        # have moved some: the caller rolls back (see ``ViewStore.write_with_events``).
        if len({(new, expected, state) for new, _, _, expected, state in moves}) == 1:
            new, _, _, expected, state = moves[0]
            slots = [(name, slot) for _, name, slot, _, _ in moves]
            match, keys = self._slots_match(slots)
            cursor.execute(
                f"UPDATE {self._slots_table} SET position = ?, last_error = NULL "
                f"WHERE position = ? AND state = ? AND {match}",
                (new, expected, state, *keys),
            )
            if _rowcount(cursor) != len(slots):
                return False
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
                cursor.execute(self._move_statement, move)
                cursor.fetchone()
        for statement, rows in self._writes(pages):
            cursor.executemany(statement, rows)
        return True

    @staticmethod
    def _slots_match(slots: Sequence[tuple[str, int]]) -> tuple[str, list[Any]]:
        """A condition selecting these (name, slot) rows of the slots table, and its values."""
        match = " OR ".join("(name = ? AND slot = ?)" for _ in slots)
        return f"({match})", [value for pair in slots for value in pair]

    def build_commits(self) -> AbstractContextManager[PageCommits | None]:
        return checkpointed_commits(
            self.commit, self._connection(), self.path, self.busy_timeout, VIEW_AUTOCHECKPOINT
        )

    def close(self) -> None:
        with self._lock:
            for connection in self._connections:
                connection.close()
            self._connections.clear()
        self._local = threading.local()
