"""Views in the event log's PostgreSQL schema: its dialect, the tracking compare-and-set
function and page commits as one pipeline.

Every statement is composed with ``psycopg.sql``, as the event storage's are.
"""

from __future__ import annotations

import hashlib
import threading
import zlib
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Final

import psycopg
from eventsourcing.persistence import PersistenceError
from eventsourcing.postgres import PostgresDatastore
from psycopg.rows import tuple_row
from psycopg.sql import SQL, Composed, Identifier, Literal, Placeholder

from runledger.infrastructure.databases import (
    MOVED_SQLSTATE,
    PIPELINE_MAX_BYTES,
    CommitRows,
    pipelined,
    psycopg_cause,
)
from runledger.infrastructure.storage.base import EVENTS_TABLE
from runledger.infrastructure.storage.log_probes import LogProbe
from runledger.infrastructure.views import compact_text as forms
from runledger.infrastructure.views.deferred_commits import StagedPage, deferred_commits
from runledger.infrastructure.views.sql import (
    REGISTRY_TABLE,
    SLOTS_TABLE,
    STREAM_BATCH,
    Cursor,
    Dialect,
    SqlViewStore,
    _TableStatements,
)
from runledger.infrastructure.views.store import PageCommit, PageCommits, TrackingState
from runledger.projections.base import Projection, Table

_TYPES: Final = {
    "text": "TEXT",
    "int": "BIGINT",
    "bool": "BOOLEAN",
    "json": "TEXT",
    "packed": "BYTEA",
    "compact": "BYTEA",
    "real": "DOUBLE PRECISION",
}
Query = SQL | Composed
"""What psycopg's ``execute`` takes: an identifier is wrapped in a one-part ``Composed``."""
ROW_WRITER_PREFIX: Final = "rl_write_"
"""The functions that write one kind of view row for the commit function, named by a digest
of their text (``PostgresViewStore._set_statement``)."""
STAGED_ROWS: Final = 64
"""The fewest upserts of a table a build's page copies through a staging table rather than
sends one statement each (``stage_page``): below it the staging table costs more."""
ANALYZE_TARGET: Final = Literal(10)
"""``default_statistics_target`` of the ``ANALYZE`` after a build: 3,000 sampled rows."""
MOVE_FUNCTION: Final = "runledger_move_view_slots"
"""The function that moves a page's tracking rows or raises ``MOVED_SQLSTATE``."""
COMPACT_TEXT_FUNCTION: Final = "runledger_compact_text_v1"
"""The function that gives the logical views a ``compact`` column's text (its forms are
``compact_text``'s, version 1: a change to them is a new function)."""


class PostgresDialect(Dialect[Query]):
    """PostgreSQL statements as ``psycopg.sql`` compositions, with tables in ``schema``."""

    types = _TYPES

    def __init__(self, schema: str) -> None:
        self.schema = schema
        self.compress_json_with_lz4: bool | None = None
        """Whether JSON columns are declared ``COMPRESSION lz4`` (the server has lz4); None
        until the first tables are created asks the server."""

    def compact_text(self, column: Query) -> Query:
        return SQL("{}({})").format(Identifier(self.schema, COMPACT_TEXT_FUNCTION), column)

    def column_type(self, kind: str) -> str:
        # A run's viewer row holds the window of its last 256 follow-ups (about 25 kB) and
        # every command on the run writes it again: pglz compressing it was a third of the
        # server's work per queue_follow_up (track_functions, P1 on a 3,000-follow-up run),
        # lz4 a seventh. The stored value is the same text either way.
        if kind == "json" and self.compress_json_with_lz4:
            return "TEXT COMPRESSION lz4"
        return super().column_type(kind)

    def sql(self, template: str, *parts: Query) -> Query:
        return SQL(template).format(*parts, mark=Placeholder())

    def identifier(self, name: str) -> Query:
        return Composed([Identifier(name)])

    def table(self, name: str) -> Query:
        return Composed([Identifier(self.schema, name)])

    def join(self, separator: str, parts: Iterable[Query]) -> Query:
        return SQL(separator).join(parts)

    def number(self, value: int) -> Query:
        return Composed([Literal(int(value))])

    def finish(self, statement: Query) -> Query:
        # Rendered once: a page commit sends these on every page, and psycopg would compose
        # the parts again on each execute.
        return SQL(statement.as_string())


def _rows(
    connection: psycopg.Connection[Any],
    statement: Query,
    params: Sequence[Any],
    probe: LogProbe | None,
) -> list[tuple[Any, ...]]:
    """The statement's rows; with ``probe``, the probe first and the statement after it in
    one pipeline (one round trip), and the rows stand only if the probe finds nothing."""
    with connection.cursor(row_factory=tuple_row) as cursor:
        if probe is None:
            cursor.execute(statement, params)
            return cursor.fetchall()
        with connection.cursor() as looking:
            with connection.pipeline():
                looking.execute(probe.statement, probe.params, prepare=True)
                cursor.execute(statement, params)
            probe.settle(looking.fetchall())
        return cursor.fetchall()


def _moved_projection(error: BaseException) -> str | None:
    """The projection named by our 'position moved' error, or None for any other error."""
    cause = psycopg_cause(error)
    if cause is not None and cause.sqlstate == MOVED_SQLSTATE and cause.diag:
        return cause.diag.message_detail
    return None


def _on_conflict(table: Table) -> Composed:
    """An upsert's conflict action: every column but the key takes the new row's value."""
    updates = [name for name in table.column_names if name not in table.key]
    if not updates:
        return SQL("DO NOTHING").format()
    return SQL("DO UPDATE SET {}").format(
        SQL(", ").join(SQL("{0} = excluded.{0}").format(Identifier(n)) for n in updates)
    )


class PostgresViewStore(SqlViewStore[Query]):
    """Views in the event log's PostgreSQL schema, through the storage's connection pool."""

    dialect: PostgresDialect

    def __init__(self, datastore: PostgresDatastore) -> None:
        self.datastore = datastore
        self.dialect = PostgresDialect(datastore.schema)
        self._move_function = Identifier(datastore.schema, MOVE_FUNCTION)
        self._move_call = self.dialect.finish(
            SQL("SELECT {}(%s, %s, %s, %s, %s)").format(self._move_function)
        )
        self._pinned = threading.local()
        self._reached_statement = SQL(
            "SELECT 1 WHERE NOT coalesce((SELECT s.position >= greatest("
            "(SELECT max(e.position) FROM {} e), %s) AND s.last_error IS NULL "
            "FROM {} s JOIN {} r ON r.name = s.name AND r.active_slot = s.slot "
            "WHERE s.name = %s), false)"
        ).format(
            Identifier(datastore.schema, EVENTS_TABLE),
            self.dialect.table(SLOTS_TABLE),
            self.dialect.table(REGISTRY_TABLE),
        )
        self._set_statements: dict[tuple[str, str, tuple[str, ...]], str] = {}
        self._staging_statements: dict[tuple[str, int], tuple[bytes, bytes, bytes]] = {}
        self._made_row_writers: set[str] | None = None
        super().__init__()
        if self._function_exists():
            return
        with self._transaction() as cursor:
            self._before_ddl(cursor)
            cursor.execute(_compact_text_function(datastore.schema))
            cursor.execute(
                SQL(
                    "CREATE OR REPLACE FUNCTION {}"
                    "(p_names text[], p_slots bigint[], p_expected bigint[], p_new bigint[], "
                    "p_states text[]) RETURNS void "
                    "LANGUAGE plpgsql AS $$ DECLARE i integer; BEGIN "
                    # One row at a time, in the given (name, slot) order: committers lock alike.
                    "FOR i IN 1 .. coalesce(array_length(p_names, 1), 0) LOOP "
                    "UPDATE {} SET position = p_new[i], last_error = NULL "
                    "WHERE name = p_names[i] AND slot = p_slots[i] AND position = p_expected[i] "
                    "AND state = p_states[i]; "
                    "IF NOT FOUND THEN RAISE EXCEPTION 'projection % moved', p_names[i] "
                    "USING ERRCODE = {}, DETAIL = p_names[i]; END IF; "
                    "END LOOP; END $$"
                ).format(self._move_function, self._slots_table, Literal(MOVED_SQLSTATE))
            )

    def reached_probe(self, name: str, at_least: int) -> LogProbe:
        # Goes out before the query in its pipeline (``_rows``), so the query's snapshot is
        # no older than the probe's: views found at the head then hold it for the query.
        return LogProbe(at_least, self._reached_statement, (at_least, name))

    def _function_exists(self) -> bool:
        rows = self._query(
            SQL(
                "SELECT count(DISTINCT p.proname) FROM pg_proc p "
                "JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = %s AND p.proname IN ({}, {})"
            ).format(Literal(MOVE_FUNCTION), Literal(COMPACT_TEXT_FUNCTION)),
            (self.datastore.schema,),
        )
        return bool(rows) and rows[0][0] == 2

    @contextmanager
    def _transaction(self) -> Iterator[Cursor]:
        with (
            self.datastore.get_connection() as connection,
            connection.transaction(),
            connection.cursor(row_factory=tuple_row) as cursor,
        ):
            yield cursor

    def _query(self, statement: Query, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        probe = self._take_probe()
        pinned: psycopg.Connection[Any] | None = getattr(self._pinned, "connection", None)
        if pinned is not None:
            return _rows(pinned, statement, params, probe)
        with self.datastore.get_connection() as connection:
            return _rows(connection, statement, params, probe)

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
            cursor.execute(self._select_all(table, slot))
            yield from cursor

    def _kinds(self, cursor: Cursor | None, names: Sequence[str]) -> dict[str, str]:
        statement = SQL(
            "SELECT c.relname, c.relkind FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = %s AND c.relname = ANY(%s)"
        )
        params = (self.datastore.schema, list(names))
        rows = (
            self._query(statement, params)
            if cursor is None
            else cursor.execute(statement, params).fetchall()
        )
        kinds = {"r": "table", "v": "view", "i": "index"}
        return {str(name): kinds.get(str(kind), "other") for name, kind in rows}

    def _columns(self, physical: str) -> list[str]:
        rows = self._query(
            SQL(
                "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
                "AND table_name = %s ORDER BY ordinal_position"
            ),
            (self.datastore.schema, physical),
        )
        return [str(row[0]) for row in rows]

    def _before_ddl(self, cursor: Cursor) -> None:
        # Concurrent CREATE TABLE IF NOT EXISTS can still collide in PostgreSQL's catalogue.
        cursor.execute(SQL("SELECT pg_advisory_xact_lock(%s)"), (zlib.crc32(b"runledger-views"),))

    def _create_tables(
        self, cursor: Cursor, projection: Projection, slot: TrackingState, *, indexes: bool
    ) -> None:
        if self.dialect.compress_json_with_lz4 is None:
            # Servers built without lz4 (or older than 14) do not list it, and keep pglz.
            row = cursor.execute(
                SQL(
                    "SELECT coalesce(bool_or('lz4' = ANY(enumvals)), false) FROM pg_settings "
                    "WHERE name = 'default_toast_compression'"
                )
            ).fetchone()
            self.dialect.compress_json_with_lz4 = bool(row and row[0])
        super()._create_tables(cursor, projection, slot, indexes=indexes)

    def _lock_registry(self, cursor: Cursor, name: str) -> None:
        cursor.execute(
            SQL("SELECT name FROM {} WHERE name = %s FOR UPDATE").format(self._registry_table),
            (name,),
        )

    def create_indexes(self, projection: Projection, slot: TrackingState) -> None:
        super().create_indexes(projection, slot)
        # After a bulk load the planner knows nothing of the new rows: without statistics it
        # may scan a whole table where an index answers in a millisecond. What it needs here
        # is row and distinct counts, which a sample of 3,000 rows gives; the default target
        # reads 30,000 rows, most tables whole, and took 8 % of a rebuild of the bench
        # history (183 ms of 1.8 s against 42 ms). Autovacuum analyses again at the server's
        # target once the tables change.
        self.analyze([(projection, slot)])

    def analyze(self, slots: Sequence[tuple[Projection, TrackingState]]) -> None:
        with self._transaction() as cursor:
            cursor.execute(SQL("SET LOCAL default_statistics_target = {}").format(ANALYZE_TARGET))
            for projection, slot in slots:
                for table in projection.tables:
                    physical = self.dialect.table(self.physical_name(table, slot))
                    cursor.execute(SQL("ANALYZE {}").format(physical))

    def commit(self, pages: Sequence[PageCommit]) -> None:
        """The whole transaction goes out as one pipeline of prepared statements.

        The tracking compare-and-set is a function that raises when a position moved, so a
        conflict aborts the transaction on the server and the COMMIT rolls it back.
        """
        try:
            # A statement that fails in the pipeline leaves the transaction aborted (the
            # server skips the COMMIT); the connection's block rolls it back as it raises.
            with self.datastore.get_connection() as connection:
                self._commit_pages(connection, pages)
        except PersistenceError as error:
            raise self.commit_error(error, pages) from error

    def _commit_pages(
        self, connection: psycopg.Connection[Any], pages: Sequence[PageCommit]
    ) -> None:
        with pipelined(connection, text_bytes(pages)) as pipeline, connection.cursor() as cursor:
            # BEGIN and COMMIT as statements of the pipeline: ``connection.transaction()``
            # synced it at each block it opened, four round trips a live page where one
            # does (a projection worker's page after each command, on PostgreSQL).
            if pipeline is None:
                with connection.transaction():
                    self._write_page(cursor, pages)
                return
            cursor.execute(b"BEGIN")
            self._write_page(cursor, pages)
            cursor.execute(b"COMMIT")

    def _write_page(self, cursor: psycopg.Cursor[Any], pages: Sequence[PageCommit]) -> None:
        # Views are rebuilt from the log, and a page's tracking commits with its rows: a page
        # lost in a crash is projected again, so no need to wait for the disk.
        cursor.execute(b"SET LOCAL synchronous_commit = off")
        self.write_with_events(cursor, pages)

    def commit_error(self, error: Exception, pages: Sequence[PageCommit]) -> Exception:
        """What a failed commit of ``pages`` raises: ``TrackingConflictError`` where the
        tracking found a projection moved, else the error itself."""
        moved = _moved_projection(error)
        if moved is None:
            return error
        page = next(page for page in pages if page.slot.name == moved)
        return self._conflict(moved, page.slot.slot, page.expected_position)

    def get_connection(self) -> AbstractContextManager[psycopg.Connection[Any]]:
        """A connection of the storage's pool for the block."""
        return self.datastore.get_connection()

    def build_commits(self) -> AbstractContextManager[PageCommits | None]:
        return deferred_commits(self)

    def stage_page(self, cursor: psycopg.Cursor[Any], pages: Sequence[PageCommit]) -> StagedPage:
        """A build's page (``build_commits``): the rows of each table's upserts copied now
        into a staging table that ends with the transaction; returns what writes the rest
        (the tracking moves, the staged rows into the tables, the other writes), statements
        that can go out in a pipeline."""
        writes: list[tuple[Query | bytes, list[tuple[Any, ...]] | None]] = []
        sent = 0
        for number, (statements, kind, changed, rows) in enumerate(self._write_plan(pages)):
            if kind != "upsert" or len(rows) < STAGED_ROWS:
                writes.append((statements.statement(kind, changed), rows))
                sent += sum(len(value) for row in rows for value in row if type(value) in _TEXTS)
                continue
            create, copy_in, upsert = self._staging(cursor, statements, number)
            cursor.execute(create)
            with cursor.copy(copy_in) as copy:
                for row in rows:
                    copy.write_row(row)
            writes.append((upsert, None))
        move_arrays = self._move_arrays(pages)

        def rest(cursor: psycopg.Cursor[Any]) -> None:
            if move_arrays[0]:
                cursor.execute(self._move_call, move_arrays)
            for statement, rows in writes:
                if rows is None:
                    cursor.execute(statement)
                else:
                    cursor.executemany(statement, rows)

        return StagedPage(rest, sent)

    def _staging(
        self, cursor: psycopg.Cursor[Any], statements: _TableStatements[Query], number: int
    ) -> tuple[bytes, bytes, bytes]:
        """The statements that stage a table's upserts in ``rl_stage_<number>`` and write them
        from there, made once per table and number: composing them again for every page was a
        sixth of a build page's staging (py-spy, P3 on PostgreSQL)."""
        key = (statements.physical, number)
        made = self._staging_statements.get(key)
        if made is None:
            stage = Identifier(f"rl_stage_{number}")
            target = Identifier(self.datastore.schema, statements.physical)
            made = self._staging_statements[key] = (
                SQL("CREATE TEMPORARY TABLE {} (LIKE {}) ON COMMIT DROP")
                .format(stage, target)
                .as_bytes(cursor),
                SQL("COPY {} FROM STDIN").format(stage).as_bytes(cursor),
                self._staged_upsert(statements, stage).as_bytes(cursor),
            )
        return made

    def _staged_upsert(self, statements: _TableStatements[Query], stage: Identifier) -> Composed:
        """The upsert of every row of ``stage`` into the table, as ``statements.upsert`` makes
        it for one."""
        table = statements.table
        columns = SQL(", ").join(map(Identifier, table.column_names))
        return SQL("INSERT INTO {} ({}) SELECT {} FROM {} ON CONFLICT ({}) {}").format(
            Identifier(self.datastore.schema, statements.physical),
            columns,
            columns,
            stage,
            SQL(", ").join(map(Identifier, table.key)),
            _on_conflict(table),
        )

    def _move_arrays(self, pages: Sequence[PageCommit]) -> tuple[list[Any], ...]:
        moves = self._moves(pages)
        return (
            [name for _, name, _, _, _ in moves],
            [slot for _, _, slot, _, _ in moves],
            [expected for _, _, _, expected, _ in moves],
            [new for new, _, _, _, _ in moves],
            [state for _, _, _, _, state in moves],
        )

    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        move_arrays = self._move_arrays(pages)
        if isinstance(cursor, CommitRows):
            # Gathered for the commit function, which makes these writes on the server.
            cursor.moves = move_arrays
            for statements, kind, changed, rows in self._write_plan(pages):
                cursor.add(self._set_statement(statements, kind, changed), rows)
            return True
        if move_arrays[0]:
            cursor.execute(self._move_call, move_arrays)
        for statement, rows in self._writes(pages):
            cursor.executemany(statement, rows)
        return True

    def _set_statement(
        self, statements: _TableStatements[Query], kind: str, changed: tuple[str, ...]
    ) -> str:
        """The call of the function that makes one kind of write to one table for each row
        of a slice of text values (see ``CommitRows``), made first if it is missing."""
        shape = (statements.physical, kind, changed)
        call = self._set_statements.get(shape)
        if call is None:
            body = self._row_write(statements, kind, changed)
            # Named by its text: a table or a statement that changes makes another function,
            # so one never needs replacing under a session that has planned it.
            name = ROW_WRITER_PREFIX + hashlib.sha256(body.encode()).hexdigest()[:24]
            function = Identifier(self.datastore.schema, name)
            if name not in self._row_writers():
                self._create_row_writer(name, function, body)
                self._row_writers().add(name)
            call = self._set_statements[shape] = (
                SQL("SELECT {}($1, $2, $3)").format(function).as_string()
            )
        return call

    def _row_write(
        self, statements: _TableStatements[Query], kind: str, changed: tuple[str, ...]
    ) -> str:
        """The loop over the rows of a slice making one row's statement each, its values
        cast back to their columns' types: the statement the pipelined path sends row by
        row, so a row is stored as it is there, and in the same order. (Its names begin
        with ``rl_``, which no view column does, so none is taken for a column.)"""
        return (
            "DECLARE rl_row integer; rl_base integer; BEGIN "
            "FOR rl_row IN 0 .. rl_count - 1 LOOP "
            f"rl_base := rl_offset + rl_row * {self._width(statements, kind, changed)}; "
            f"{self._one_row(statements, kind, changed)}; END LOOP; END"
        )

    @staticmethod
    def _names(
        statements: _TableStatements[Query], kind: str, changed: tuple[str, ...]
    ) -> tuple[str, ...]:
        """The columns of a row of this write, in the order its values come."""
        table = statements.table
        if kind == "delete":
            return table.key
        if kind == "upsert":
            return table.column_names
        return (*changed, *table.key)

    def _width(
        self, statements: _TableStatements[Query], kind: str, changed: tuple[str, ...]
    ) -> int:
        return len(self._names(statements, kind, changed))

    def _one_row(
        self, statements: _TableStatements[Query], kind: str, changed: tuple[str, ...]
    ) -> str:
        """One row's statement, its values read from ``rl_values`` after ``rl_base``."""
        table = statements.table
        kinds = table.kinds
        names = self._names(statements, kind, changed)
        values = {
            name: SQL("rl_values[rl_base + {}]::{}").format(
                Literal(number), SQL(_TYPES[kinds[name]])
            )
            for number, name in enumerate(names, start=1)
        }
        target = Identifier(self.datastore.schema, statements.physical)
        key_match = SQL(" AND ").join(
            SQL("{} = {}").format(Identifier(name), values[name]) for name in table.key
        )
        if kind == "delete":
            return SQL("DELETE FROM {} WHERE {}").format(target, key_match).as_string()
        if kind == "update":
            assignments = SQL(", ").join(
                SQL("{} = {}").format(Identifier(name), values[name]) for name in changed
            )
            return (
                SQL("UPDATE {} SET {} WHERE {}").format(target, assignments, key_match).as_string()
            )
        return (
            SQL("INSERT INTO {} ({}) VALUES ({}) ON CONFLICT ({}) {}")
            .format(
                target,
                SQL(", ").join(map(Identifier, names)),
                SQL(", ").join(values[name] for name in names),
                SQL(", ").join(map(Identifier, table.key)),
                _on_conflict(table),
            )
            .as_string()
        )

    def _row_writers(self) -> set[str]:
        """The row writers the schema has, read once (a process that opens a store finds
        them all made by those before it, in one query rather than one look each)."""
        if self._made_row_writers is None:
            rows = self._query(
                SQL(
                    "SELECT p.proname FROM pg_proc p JOIN pg_namespace n "
                    "ON n.oid = p.pronamespace "
                    "WHERE n.nspname = %s AND starts_with(p.proname, {})"
                ).format(Literal(ROW_WRITER_PREFIX)),
                (self.datastore.schema,),
            )
            self._made_row_writers = {str(row[0]) for row in rows}
        return self._made_row_writers

    def _create_row_writer(self, name: str, function: Identifier, body: str) -> None:
        """Make the function (plpgsql keeps the plan of its static statement for the
        session, where a statement run by ``EXECUTE`` is planned on every call).

        On a connection of its own: the thread may hold a command's transaction, whose
        rollback would take the function with it while this process took it for made."""
        settings = getattr(self.datastore, "settings", None)
        conninfo = settings.conninfo if settings is not None else None
        if conninfo is None:
            msg = "the view store's datastore has no conninfo"
            raise PersistenceError(msg)
        with (
            psycopg.connect(conninfo, autocommit=True) as connection,
            connection.transaction(),
            connection.cursor(row_factory=tuple_row) as cursor,
        ):
            self._before_ddl(cursor)
            exists = cursor.execute(
                "SELECT 1 FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = %s AND p.proname = %s",
                (self.datastore.schema, name),
            ).fetchone()
            if exists is None:
                cursor.execute(
                    SQL(
                        "CREATE FUNCTION {}(rl_values text[], rl_offset integer, "
                        "rl_count integer) RETURNS void "
                        "LANGUAGE plpgsql AS {}"
                    ).format(
                        function,
                        Literal(body),
                    )
                )


def _compact_text_function(schema: str) -> Composed:
    """``COMPACT_TEXT_FUNCTION``: ``compact_text.expanded`` in SQL, which raises for bytes of
    no form as it does, so an ad-hoc read never shows some other text."""
    prefixes = SQL(", ").join(Literal(prefix) for prefix in forms.PREFIXES)
    body = SQL(
        "DECLARE micros bigint; fraction bigint; BEGIN "
        "IF length(value) >= 1 AND get_byte(value, 0) = {text} THEN "
        "RETURN convert_from(substring(value FROM 2), 'UTF8'); END IF; "
        "IF length(value) = 9 AND get_byte(value, 0) = {time} THEN "
        "micros := ('x' || encode(substring(value FROM 2), 'hex'))::bit(64)::bigint; "
        "IF micros BETWEEN {first} AND {last} THEN "
        # Whole seconds and the fraction apart: an interval multiplied by the microseconds
        # goes through a double and is rounded.
        "fraction := (micros % 1000000 + 1000000) % 1000000; "
        "RETURN to_char(to_timestamp((micros - fraction) / 1000000) AT TIME ZONE 'UTC', "
        "'YYYY-MM-DD\"T\"HH24:MI:SS') || CASE WHEN fraction = 0 THEN '' "
        "ELSE '.' || lpad(fraction::text, 6, '0') END || '+00:00'; END IF; END IF; "
        "IF length(value) >= 3 AND get_byte(value, 0) = {hex} "
        "AND get_byte(value, 1) < {count} THEN "
        "RETURN (ARRAY[{prefixes}]::text[])[get_byte(value, 1) + 1] "
        "|| encode(substring(value FROM 3), 'hex'); END IF; "
        "RAISE EXCEPTION 'a compact value of no form: %', value "
        "USING ERRCODE = 'data_corrupted'; END"
    ).format(
        text=Literal(forms.TEXT),
        time=Literal(forms.TIME),
        hex=Literal(forms.HEX),
        first=Literal(forms.FIRST_MICROS),
        last=Literal(forms.LAST_MICROS),
        count=Literal(len(forms.PREFIXES)),
        prefixes=prefixes,
    )
    return SQL(
        "CREATE OR REPLACE FUNCTION {}(value bytea) RETURNS text "
        "LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE AS {}"
    ).format(Identifier(schema, COMPACT_TEXT_FUNCTION), Literal(body.as_string()))


_TEXTS: Final = (str, bytes)


def text_bytes(pages: Sequence[PageCommit]) -> int:
    """About how many bytes of text the pages' rows send, counted until it is clear that
    they are too many for one pipeline (``PIPELINE_MAX_BYTES``)."""
    total = 0
    for page in pages:
        for changes in page.changes.values():
            for row in changes.values():
                if row is None:
                    continue
                for value in row.values():
                    if type(value) in _TEXTS:
                        total += len(value)
                if total > PIPELINE_MAX_BYTES:
                    return total
    return total
