"""Fixtures shared by every test: PostgreSQL databases, SQLite files and opened event storages.

PostgreSQL comes from ``RUNLEDGER_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``). When it cannot be reached the tests that
need it are skipped locally, but fail when ``CI`` is set: a database test must never pass in CI
by not running.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from psycopg import sql

if TYPE_CHECKING:
    from runledger.domain.ports import EventStorage

POSTGRES_URL_VARIABLE = "RUNLEDGER_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"

STORAGE_BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


class PostgresServer:
    """The test server, through one autocommit admin connection: creates and drops databases."""

    def __init__(self, admin_url: str, connection: psycopg.Connection[tuple[object, ...]]):
        self.admin_url = admin_url
        self.connection = connection
        # The pid keeps concurrent test sessions on one server apart; the hex, reruns.
        self.prefix = f"runledger_test_{os.getpid()}_{secrets.token_hex(4)}"
        self._count = 0

    def new_database_name(self) -> str:
        """A database name no other test or session uses."""
        self._count += 1
        return f"{self.prefix}_{self._count}"

    def create_database(self, name: str) -> str:
        """Create an empty database and return its URL."""
        self.connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
        parts = urlsplit(self.admin_url)
        return urlunsplit(parts._replace(path=f"/{name}"))

    def drop_database(self, name: str) -> None:
        """Drop a database, ending the connections still open to it (pools a test leaked)."""
        self.connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
        )

    def drop_leftovers(self) -> None:
        """Drop every database of this session that a failed teardown left behind."""
        rows = self.connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s",
            (f"{self.prefix}%",),
        ).fetchall()
        for (name,) in rows:
            self.drop_database(str(name))


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """The PostgreSQL server named by ``RUNLEDGER_TEST_POSTGRES_URL``."""
    admin_url = os.environ.get(POSTGRES_URL_VARIABLE) or DEFAULT_POSTGRES_URL
    try:
        connection = psycopg.connect(admin_url, autocommit=True, connect_timeout=5)
    except psycopg.OperationalError as error:
        message = f"PostgreSQL unreachable at {POSTGRES_URL_VARIABLE}={admin_url!r}: {error}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    server = PostgresServer(admin_url, connection)
    try:
        yield server
    finally:
        server.drop_leftovers()
        connection.close()


@pytest.fixture(scope="session")
def postgres_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A database created for this test session (dropped at its end); tests share it."""
    name = postgres_server.new_database_name()
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture
def postgres_store_url(postgres_server: PostgresServer) -> Iterator[str]:
    """A URL to a brand-new, empty database for this test alone, dropped after it.

    A fresh database (about 25 ms to create, 45 ms to drop here) rather than a fresh schema:
    a URL cannot name a schema, and a whole database also isolates what schemas would not
    (NOTIFY channels, advisory locks, tracking tables other components create).
    """
    name = postgres_server.new_database_name()
    url = postgres_server.create_database(name)
    yield url
    postgres_server.drop_database(name)


@pytest.fixture
def sqlite_path(tmp_path: Path) -> str:
    """A path for a new SQLite file in this test's temporary directory."""
    return str(tmp_path / "runledger.db")


@pytest.fixture(params=STORAGE_BACKENDS)
def storage_backend(request: pytest.FixtureRequest) -> str:
    """The name of the backend a storage test runs on: memory, sqlite or postgresql."""
    backend: str = request.param
    return backend


@pytest.fixture
def open_storage(
    storage_backend: str, request: pytest.FixtureRequest
) -> Iterator[Callable[[], EventStorage]]:
    """Opens storages on one target for this test and closes them after it.

    Each call opens another storage on the same SQLite file or PostgreSQL database; for
    memory, each call gives a new and separate store.
    """
    opened: list[EventStorage] = []

    def open_one() -> EventStorage:
        storage: EventStorage
        if storage_backend == "memory":
            from runledger.infrastructure.storage.memory import MemoryStorage

            storage = MemoryStorage()
        elif storage_backend == "sqlite":
            from runledger.infrastructure.storage.sqlite import SQLiteStorage

            storage = SQLiteStorage(request.getfixturevalue("sqlite_path"))
        else:
            from runledger.infrastructure.storage.postgres import PostgresStorage

            storage = PostgresStorage(request.getfixturevalue("postgres_store_url"), pool_size=2)
        opened.append(storage)
        return storage

    yield open_one
    for storage in reversed(opened):
        storage.close()


@pytest.fixture
def storage(open_storage: Callable[[], EventStorage]) -> EventStorage:
    """An opened, empty event storage on each backend (closed after the test)."""
    return open_storage()


@pytest.fixture(scope="session", autouse=True)
def _runledger_is_imported_under_one_name_only() -> Iterator[None]:
    """The folders install as ``runledger.*``; a bare ``import domain`` would load every module
    a second time under another name (two classes per event, two catalogues)."""
    yield
    import sys

    bare = sorted(
        name
        for name in sys.modules
        if name.split(".")[0] in {"domain", "projections", "infrastructure"}
    )
    assert bare == [], f"modules imported under a bare folder name: {bare}"
