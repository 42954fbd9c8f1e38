"""What ``queue_follow_up`` is measured against, besides a raw commit, in the same run.

- **ideal**: a hand-written transaction doing exactly one command's work. The rows are those
  a real ``queue_follow_up`` wrote on the same backend (read back after one command: its
  event rows, every view row it inserted or changed, and the projections' tracking), written
  again with plain SQL in one transaction per command (one pipeline on PostgreSQL), with new
  keys where the command inserted a row. No reads, no locks, no Python domain code.
- **library**: the eventsourcing library's plain ``Application`` with one aggregate, saving one
  event per command through the library's own SQLite or PostgreSQL persistence module
  (configured by its environment settings), in a scratch database of its own.

Both run for a fixed time in one process, or in several at once (``in_processes``).
"""

from __future__ import annotations

import multiprocessing
import queue
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import psycopg
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event

from runledger.domain.packed_state import unpacked
from runledger.infrastructure.cli.bench.cpu_gaps import spin
from runledger.infrastructure.runtime import default_projections, open_runtime
from runledger.infrastructure.storage.postgres import unavailable_error
from runledger.infrastructure.storage.urls import libpq_url, read_postgres_url
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.sql import SLOTS_TABLE
from runledger.projections.base import Table

EVENTS_TABLE = "runledger_events"

Command = Callable[[WorkflowStore, int], None]
"""One real command, number ``n`` of a series, on an open store."""


@contextmanager
def plain_connection(url: str) -> Iterator[Any]:
    """A plain sqlite3 (WAL, ``synchronous=FULL``, as the event store) or autocommit psycopg
    connection to the database at ``url``."""
    if url.startswith("sqlite:///"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("PRAGMA synchronous=FULL")
        try:
            yield connection
        finally:
            connection.close()
    else:
        with server_connection(url) as server:
            yield server


def payload_bytes(url: str) -> int:
    """The events' JSON payload bytes: what the history holds, however the log keeps it."""
    with plain_connection(url) as connection:
        cursor = connection.execute("SELECT state FROM runledger_events")
        total = 0
        while rows := cursor.fetchmany(10_000):
            total += sum(len(unpacked(row[0])) for row in rows)
    return total


@contextmanager
def server_connection(url: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit psycopg connection to the PostgreSQL database at ``url``, whose failure
    to connect is a ``StorageUnavailableError`` as the store's own are (a raw psycopg error
    would reach the bench's user as an internal error, with libpq's words only)."""
    try:
        connection = psycopg.connect(libpq_url(url), autocommit=True)
    except psycopg.Error as error:
        unavailable = unavailable_error(error, read_postgres_url(url))
        if unavailable is None:
            raise
        raise unavailable from error
    with connection:
        yield connection


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


@dataclass(frozen=True)
class RowWrite:
    """One row a command wrote: where, its values, and which key columns a new row varies."""

    table: str
    columns: tuple[str, ...]
    values: tuple[Any, ...]
    varied: tuple[int, ...]
    """Indexes of the columns that get a new value per command (new rows' text keys, event
    originator ids); the others are written as the real command wrote them."""
    conflict: tuple[str, ...]
    """The key to upsert on; empty for a plain insert."""

    def statement(self, marker: str) -> str:
        """The INSERT (or upsert) of this row with ``marker`` placeholders."""
        names = ", ".join(_quote(name) for name in self.columns)
        marks = ", ".join(marker for _ in self.columns)
        statement = f"INSERT INTO {_quote(self.table)} ({names}) VALUES ({marks})"
        if self.conflict:
            updates = [name for name in self.columns if name not in self.conflict]
            keys = ", ".join(_quote(name) for name in self.conflict)
            assignments = ", ".join(f"{_quote(n)} = excluded.{_quote(n)}" for n in updates)
            statement += f" ON CONFLICT ({keys}) DO UPDATE SET {assignments}"
        return statement

    def params(self, number: int) -> tuple[Any, ...]:
        """The values for command ``number``."""
        if not self.varied:
            return self.values
        values = list(self.values)
        for index in self.varied:
            value = values[index]
            if isinstance(value, uuid.UUID):
                values[index] = uuid.uuid4()
            elif self.table == EVENTS_TABLE:
                values[index] = uuid.uuid4().hex
            else:
                values[index] = f"{value}~ideal-{number}"
        return tuple(values)


def _view_rows(connection: Any, table: Table) -> dict[tuple[Any, ...], tuple[Any, ...]]:
    columns = ", ".join(_quote(name) for name in table.column_names)
    rows = connection.execute(f"SELECT {columns} FROM {_quote(table.name)}").fetchall()
    key_at = [table.column_names.index(name) for name in table.key]
    return {tuple(row[index] for index in key_at): tuple(row) for row in rows}


def _view_tables() -> list[Table]:
    return [table for projection in default_projections() for table in projection.tables]


class IdealCommand:
    """The rows one real command wrote, and plain SQL writing them again."""

    def __init__(self, url: str, writes: Sequence[RowWrite], tracked: int) -> None:
        self.url = url
        self.writes = list(writes)
        self.tracked = tracked
        """How far each command moves the projections' tracking positions."""
        self.sqlite = url.startswith("sqlite:///")
        marker = "?" if self.sqlite else "%s"
        self.statements = [write.statement(marker) for write in self.writes]
        self.deadlocks = 0
        """Transactions the server ended as deadlock victims, each run again."""
        # The tracking rows locked in one order, by name, as the store's commit function
        # takes them: ideal writers that met them in whatever order the scan did deadlocked,
        # and each deadlock stalled a writer for the server's deadlock_timeout (1 s), which
        # made P2's ideal swing between about 300 and 1,300 commands/s from run to run.
        self.tracking = (
            f"UPDATE {_quote(SLOTS_TABLE)} SET position = position + {marker} "
            "WHERE state = 'active'"
            if self.sqlite
            else f"UPDATE {_quote(SLOTS_TABLE)} SET position = position + {marker} "
            f"WHERE (name, slot) IN (SELECT name, slot FROM {_quote(SLOTS_TABLE)} "
            "WHERE state = 'active' ORDER BY name, slot FOR UPDATE)"
        )

    @classmethod
    def recorded(
        cls, url: str, setup: Callable[[WorkflowStore], None], command: Command
    ) -> IdealCommand:
        """Run ``setup`` and two real commands on a new store at ``url``; the second one's rows."""
        tables = _view_tables()
        with open_runtime(url) as runtime:
            store = WorkflowStore(runtime)
            # The rows live in the active slot's tables (the logical names are views onto them).
            physical = {
                table.name: runtime.views.physical_name(table, runtime.views.active_slot(table))
                for table in tables
            }
            setup(store)
            command(store, 0)
            with plain_connection(url) as connection:
                head = connection.execute(f"SELECT max(position) FROM {EVENTS_TABLE}").fetchone()[0]
                before = {table.name: _view_rows(connection, table) for table in tables}
            command(store, 1)
            # The next query catches the views up to the command (read-your-writes).
            store.projection_status()
        writes: list[RowWrite] = []
        marker = "?" if url.startswith("sqlite:///") else "%s"
        with plain_connection(url) as connection:
            cursor = connection.execute(
                f"SELECT * FROM {EVENTS_TABLE} WHERE position > {marker} ORDER BY position",
                (head,),
            )
            names = [column[0] for column in cursor.description]
            events = cursor.fetchall()
            kept = [index for index, name in enumerate(names) if name != "position"]
            columns = tuple(names[index] for index in kept)
            for row in events:
                writes.append(
                    RowWrite(
                        EVENTS_TABLE,
                        columns,
                        tuple(row[index] for index in kept),
                        (columns.index("originator_id"),),
                        (),
                    )
                )
            for table in tables:
                old = before[table.name]
                for key, row in _view_rows(connection, table).items():
                    if old.get(key) == row:
                        continue
                    varied = (
                        ()
                        if key in old
                        else tuple(
                            table.column_names.index(name)
                            for name, kind in table.columns
                            if name in table.key and kind == "text"
                        )
                    )
                    writes.append(
                        RowWrite(physical[table.name], table.column_names, row, varied, table.key)
                    )
        return cls(url, writes, len(events))

    def _write(self, connection: Any, number: int) -> None:
        if self.sqlite:
            # The write lock up front: concurrent ideal writers (P2b) queue on the busy timeout.
            connection.execute("BEGIN IMMEDIATE")
            for statement, write in zip(self.statements, self.writes, strict=True):
                connection.execute(statement, write.params(number))
            connection.execute(self.tracking, (self.tracked,))
            connection.execute("COMMIT")
            return
        while True:
            try:
                with connection.pipeline(), connection.transaction():
                    for statement, write in zip(self.statements, self.writes, strict=True):
                        connection.execute(statement, write.params(number))
                    connection.execute(self.tracking, (self.tracked,))
            except psycopg.errors.DeadlockDetected:
                # Not from the tracking rows (taken in one order): a victim of any other
                # lock runs again, as the store's commands do.
                self.deadlocks += 1
                continue
            return

    def for_writer(self, writer: int) -> IdealCommand:
        """The same work on rows of writer ``writer``'s own: every key it writes is its own,
        as each of several writer processes queueing on its own run."""
        own = [
            RowWrite(
                write.table,
                write.columns,
                tuple(
                    f"{value}~writer-{writer}"
                    if write.table != EVENTS_TABLE
                    and name in write.conflict
                    and isinstance(value, str)
                    else value
                    for name, value in zip(write.columns, write.values, strict=True)
                ),
                write.varied,
                write.conflict,
            )
            for write in self.writes
        ]
        return IdealCommand(self.url, own, self.tracked)

    def rate(self, seconds: float, *, first: int = 0, gap: float = 0.0) -> float:
        """Commands per second for ``seconds``, numbered from ``first``, each after ``gap``
        seconds of processor work (``cpu_gaps.spin``)."""
        with plain_connection(self.url) as connection:
            count = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                spin(gap)
                self._write(connection, first + count)
                count += 1
            return count / (time.perf_counter() - started)


class Counter(Aggregate):
    """The library baseline's aggregate: one event per command."""

    @event("Bumped")
    def bump(self, note: str) -> None:
        """Record one bump."""


class LibraryBaseline:
    """The eventsourcing library's plain ``Application`` on the database at ``url``."""

    def __init__(self, url: str, *, create_table: bool = True) -> None:
        self.url = url
        self.create_table = create_table

    def prepared(self) -> LibraryBaseline:
        """The baseline with its tables made, for several processes at once (PostgreSQL
        refuses concurrent CREATE TABLE IF NOT EXISTS of one table)."""
        Application[uuid.UUID](env=self.environment()).close()
        return LibraryBaseline(self.url, create_table=False)

    def environment(self) -> dict[str, str]:
        """The library's persistence settings for ``url``."""
        create = {"CREATE_TABLE": "y" if self.create_table else "n"}
        if self.url.startswith("sqlite:///"):
            return {
                **create,
                "PERSISTENCE_MODULE": "eventsourcing.sqlite",
                "SQLITE_DBNAME": self.url.removeprefix("sqlite:///"),
            }
        parts = urlsplit(self.url)
        return {
            **create,
            "PERSISTENCE_MODULE": "eventsourcing.postgres",
            "POSTGRES_DBNAME": parts.path.lstrip("/"),
            "POSTGRES_HOST": parts.hostname or "localhost",
            "POSTGRES_PORT": str(parts.port or 5432),
            "POSTGRES_USER": unquote(parts.username or "postgres"),
            "POSTGRES_PASSWORD": unquote(parts.password or ""),
            "POSTGRES_LOCK_TIMEOUT": "5",
        }

    def rate(self, seconds: float) -> float:
        """Saves of one new event on one aggregate per second, for ``seconds``."""
        app: Application[uuid.UUID] = Application(env=self.environment())
        try:
            counter = Counter()
            app.save(counter)
            count = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                counter.bump(note=f"bump {count}: check the edge cases")
                app.save(counter)
                count += 1
            return count / (time.perf_counter() - started)
        finally:
            app.close()


def _measured(measure: Callable[[], float], start: StartLine, results: Any) -> None:
    start.wait()
    results.put(measure())


class StartLine:
    """Where processes that measure together wait for each other. Each comes to it once its
    imports and setup are done; ``release`` lets them all go when every one is there.

    A fixed wait instead (a second) let each go as soon as it was ready: on a slow machine
    the writers of P2 came after 1.6-2.0 s, so their windows of 0.67 s overlapped by half and
    the sum of their rates was not that of four processes at once."""

    def __init__(self, context: Any) -> None:
        self._there = context.Semaphore(0)
        self._go = context.Event()

    def wait(self) -> None:
        """In a process: say it is ready, and wait for the others."""
        self._there.release()
        self._go.wait()

    def release(self, processes: Sequence[Any]) -> None:
        """Let ``processes`` go once each is at the line (one that died first fails it)."""
        for _ in processes:
            while not self._there.acquire(timeout=1.0):
                _raise_if_failed(processes)
        self._go.set()


PRELOADED: Final = ("runledger.infrastructure.cli.bench.runner",)
"""What the bench's fork server imports once, so that each measuring process it forks begins
with the bench's modules loaded: a new interpreter imported them in 1.4-2.0 s, and P2 alone
started 48 processes."""


def _processes() -> Any:
    """Where the bench's processes come from: forks of a server that holds nothing but the
    imports (no connection, no thread), so a child shares no state with the bench."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOADED))
    return context


def at_once(target: Callable[..., None], args: Sequence[tuple[Any, ...]]) -> list[Any]:
    """One process per args tuple, each running ``target(*args, start, results)`` and
    beginning together at ``start`` (a ``StartLine``); what each put on ``results``."""
    context = _processes()
    start = StartLine(context)
    results = context.Queue()
    processes = [context.Process(target=target, args=(*a, start, results)) for a in args]
    for process in processes:
        process.start()
    start.release(processes)
    return collected(results, processes)


def in_processes(measures: Sequence[Callable[[], float]]) -> float:
    """The summed rate of ``measures`` (picklable callables), each in its own process, at once."""
    rates: list[float] = at_once(_measured, [(measure,) for measure in measures])
    return sum(rates)


def _raise_if_failed(processes: Sequence[Any]) -> None:
    failed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
    if failed:
        msg = f"a bench process failed (exit codes {failed}); see its traceback above"
        raise RuntimeError(msg) from None


def collected(results: Any, processes: Sequence[Any]) -> list[Any]:
    """What each of ``processes`` put on ``results``, once they all ended; a process that
    died without a result fails the measurement at once rather than after a long wait."""
    outcomes: list[Any] = []
    while len(outcomes) < len(processes):
        try:
            outcomes.append(results.get(timeout=1.0))
        except queue.Empty:
            _raise_if_failed(processes)
    for process in processes:
        process.join(timeout=30)
    return outcomes
