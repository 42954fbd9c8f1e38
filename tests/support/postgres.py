"""The PostgreSQL test server and its pool of prepared databases, reset between tests.

Creating and dropping a database per test cost most of the PostgreSQL test time: each
``CREATE DATABASE`` copies a template and each ``DROP DATABASE`` waits for a checkpoint that
every other session on the server makes longer, and then every store had to create
runledger's tables again. A pooled database is created once, opened once by a store (so
runledger's tables and their initial rows exist), and after each test is put back exactly as
it was then: its rows deleted, its sequences restarted.

What a fresh database isolated stays isolated: a database is reset only when nothing is
connected to it any more, so no LISTEN registration, pending NOTIFY, advisory lock or open
transaction of one test reaches the next (all of them belong to sessions, and the sessions
are gone). Sequences restart and the tables' initial rows (the projections' tracking rows)
are written back as they were. A test that leaves anything connected (a leaked store, a
process still running), or that changed the catalogue (another schema, a rebuilt
projection's tables, a function), gets its database dropped instead of reused, as before. The
view-row writer functions stores make as they go are the one exception
(``without_row_writers``).
"""

from __future__ import annotations

import os
import secrets
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg import sql

DISCONNECT_WAIT_SECONDS = 2.0
"""How long a test's closed connections may take to leave the server before they count as
leaked (a backend exits a moment after its client hangs up)."""

# Everything a test could create or change in a database, as comparable text: schemas,
# relations with their columns, index and constraint definitions, functions and triggers.
CATALOGUE_QUERY = r"""
WITH user_namespaces AS (
    SELECT oid, nspname FROM pg_namespace
    WHERE nspname NOT LIKE 'pg\_%' AND nspname <> 'information_schema'
)
SELECT 'schema', nspname, '' FROM user_namespaces
UNION ALL
SELECT 'relation ' || c.relkind::text, n.nspname || '.' || c.relname,
       coalesce((SELECT string_agg(
                     a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
                     || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
                     || CASE WHEN a.attidentity <> '' THEN ' identity' ELSE '' END,
                     ', ' ORDER BY a.attnum)
                 FROM pg_attribute a
                 WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped), '')
FROM pg_class c JOIN user_namespaces n ON n.oid = c.relnamespace
UNION ALL
SELECT 'index', n.nspname || '.' || c.relname, pg_get_indexdef(c.oid)
FROM pg_class c JOIN user_namespaces n ON n.oid = c.relnamespace WHERE c.relkind = 'i'
UNION ALL
SELECT 'constraint', n.nspname || '.' || con.conname, pg_get_constraintdef(con.oid)
FROM pg_constraint con JOIN user_namespaces n ON n.oid = con.connamespace
UNION ALL
SELECT 'function', n.nspname || '.' || p.proname || '(' ||
       pg_get_function_identity_arguments(p.oid) || ')', md5(p.prosrc)
FROM pg_proc p JOIN user_namespaces n ON n.oid = p.pronamespace
UNION ALL
SELECT 'trigger', tg.tgname, pg_get_triggerdef(tg.oid)
FROM pg_trigger tg JOIN pg_class c ON c.oid = tg.tgrelid
JOIN user_namespaces n ON n.oid = c.relnamespace WHERE NOT tg.tgisinternal
ORDER BY 1, 2, 3
"""

TABLES_QUERY = r"""
SELECT schemaname, tablename FROM pg_tables
WHERE schemaname NOT LIKE 'pg\_%' AND schemaname <> 'information_schema'
ORDER BY 1, 2
"""

SEQUENCES_QUERY = r"""
SELECT schemaname, sequencename FROM pg_sequences
WHERE schemaname NOT LIKE 'pg\_%' AND schemaname <> 'information_schema'
ORDER BY 1, 2
"""

Connection = psycopg.Connection[tuple[object, ...]]


class PostgresServer:
    """The test server, through one autocommit admin connection: creates and drops databases."""

    def __init__(self, admin_url: str, connection: Connection):
        self.admin_url = admin_url
        self.connection = connection
        # The pid keeps concurrent test sessions on one server apart; the hex, reruns.
        self.prefix = f"runledger_test_{os.getpid()}_{secrets.token_hex(4)}"
        self._count = 0

    def new_database_name(self) -> str:
        """A database name no other test or session uses."""
        self._count += 1
        return f"{self.prefix}_{self._count}"

    def url_of(self, name: str) -> str:
        """The URL of database ``name`` on this server."""
        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path=f"/{name}"))

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        self.connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        return self.url_of(name)

    def drop_database(self, name: str) -> None:
        """Drop a database, ending the connections still open to it (pools a test leaked)."""
        self.connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def connected_backends(self, name: str) -> int:
        """How many sessions other than the admin connection are connected to ``name``."""
        row = self.connection.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()",
            (name,),
        ).fetchone()
        return int(str(row[0])) if row else 0

    def drop_leftovers(self) -> None:
        """Drop every database of this session that a failed teardown left behind."""
        rows = self.connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"{self.prefix}%",),
        ).fetchall()
        for (name,) in rows:
            self.drop_database(str(name))


@dataclass(frozen=True)
class Baseline:
    """A prepared database as a store first left it: its catalogue and its tables' rows."""

    catalogue: list[tuple[object, ...]]
    tables: list[sql.Composed]
    sequences: list[sql.Composed]
    rows: list[tuple[sql.Composed, str]]
    """Each table that has rows, with its rows as one JSON array (written back after the reset)."""

    @classmethod
    def read(cls, connection: Connection) -> Baseline:
        """The baseline of the database ``connection`` is connected to."""
        tables = [
            sql.SQL("{}.{}").format(sql.Identifier(str(schema)), sql.Identifier(str(table)))
            for schema, table in connection.execute(TABLES_QUERY).fetchall()
        ]
        sequences = [
            sql.SQL("{}.{}").format(sql.Identifier(str(schema)), sql.Identifier(str(name)))
            for schema, name in connection.execute(SEQUENCES_QUERY).fetchall()
        ]
        rows: list[tuple[sql.Composed, str]] = []
        for table in tables:
            found = connection.execute(
                sql.SQL("SELECT jsonb_agg(t)::text FROM {} AS t").format(table)
            ).fetchone()
            if found and found[0] is not None:
                rows.append((table, str(found[0])))
        return cls(without_row_writers(catalogue(connection)), tables, sequences, rows)

    def restore(self, connection: Connection) -> None:
        """Empty every table, restart every sequence and write the initial rows back."""
        with connection.transaction():
            # DELETE rather than TRUNCATE: a test leaves a few rows, and TRUNCATE's new files
            # for every table cost a hundred times more than deleting them.
            for table in self.tables:
                connection.execute(sql.SQL("DELETE FROM {}").format(table))
            for sequence in self.sequences:
                connection.execute(sql.SQL("ALTER SEQUENCE {} RESTART").format(sequence))
            for table, rows in self.rows:
                connection.execute(
                    sql.SQL(
                        "INSERT INTO {0} OVERRIDING SYSTEM VALUE "
                        "SELECT * FROM jsonb_populate_recordset(NULL::{0}, %s::jsonb)"
                    ).format(table),
                    (rows,),
                )


def catalogue(connection: Connection) -> list[tuple[object, ...]]:
    """Every user-made object of the database, for comparison with a baseline."""
    return connection.execute(CATALOGUE_QUERY).fetchall()


def without_row_writers(found: list[tuple[object, ...]]) -> list[tuple[object, ...]]:
    """The catalogue without the view-row writer functions a store installs on its first
    commands.

    A store creates them when a command first writes that kind of row, so after almost any
    test the catalogue had more than the baseline. Dropping them after each test made every
    PostgreSQL test create them again, on a connection of their own, under the DDL lock: a
    quarter of the scenario tests' time. They are kept instead: each is named by the hash of
    its body, so one a test finds is exactly the one it would have made (a process opening a
    store finds those made before it, the same way), and no test's rows live in them.
    """
    from runledger.infrastructure.views.postgres import ROW_WRITER_PREFIX

    return [
        row
        for row in found
        if not (
            row[0] == "function" and str(row[1]).partition(".")[2].startswith(ROW_WRITER_PREFIX)
        )
    ]


class DatabasePool:
    """Databases holding runledger's empty tables, lent to one test at a time."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self._idle: list[str] = []
        self._baseline: Baseline | None = None

    @contextmanager
    def lend(self) -> Iterator[str]:
        """A URL to a database with runledger's tables and no events, for one test."""
        name = self._idle.pop() if self._idle else self._prepare()
        try:
            yield self.server.url_of(name)
        finally:
            if self._reset(name):
                self._idle.append(name)
            else:
                self.server.drop_database(name)

    def close(self) -> None:
        """Drop every idle database."""
        while self._idle:
            self.server.drop_database(self._idle.pop())

    def _prepare(self) -> str:
        # Imported here: the fixtures module must import without the package's heavy modules.
        from runledger.infrastructure import open_store

        name = self.server.new_database_name()
        url = self.server.create_database(name)
        open_store(url).close()
        if self._baseline is None:
            if not self._wait_until_disconnected(name):
                msg = f"a store left connections open to {name} after closing"
                raise RuntimeError(msg)
            with psycopg.connect(url, autocommit=True) as connection:
                self._baseline = Baseline.read(connection)
        return name

    def _reset(self, name: str) -> bool:
        """Put ``name`` back as prepared; False when it cannot be (then it is dropped)."""
        if self._baseline is None or not self._wait_until_disconnected(name):
            return False
        with psycopg.connect(self.server.url_of(name), autocommit=True) as connection:
            if without_row_writers(catalogue(connection)) != self._baseline.catalogue:
                return False
            self._baseline.restore(connection)
        return True

    def _wait_until_disconnected(self, name: str) -> bool:
        deadline = time.monotonic() + DISCONNECT_WAIT_SECONDS
        while self.server.connected_backends(name):
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.005)
        return True
