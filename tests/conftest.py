"""Fixtures shared by every test: PostgreSQL databases, SQLite files and opened event storages.

PostgreSQL comes from ``RUNLEDGER_TEST_POSTGRES_URL`` (default
``postgresql://postgres@127.0.0.1:5432/postgres``). When it cannot be reached the tests that
need it are skipped locally, but fail when ``CI`` is set: a database test must never pass in CI
by not running.
"""

from __future__ import annotations

import compileall
import importlib.util
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import psycopg
import pytest

from tests.support.clusters import (
    POSTGRES_BIN,
    PgBouncer,
    ThrowawayCluster,
    binaries_or_skip,
    owned_scratch_folder,
    pooled,
    throwaway,
)
from tests.support.postgres import DatabasePool, PostgresServer

if TYPE_CHECKING:
    from runledger.infrastructure.commits.ports import EventStorage

POSTGRES_URL_VARIABLE = "RUNLEDGER_TEST_POSTGRES_URL"
DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def pytest_configure(config: pytest.Config) -> None:
    """Compile the installed package's modules once, before any worker starts.

    Hundreds of tests run the CLI in a new process. Where ``PYTHONDONTWRITEBYTECODE`` is set
    (as on this project's machines) no process writes the bytecode of the editable install's
    modules, so each one compiled all of them again from source: about 0.4 s of CPU a
    process. Python still reads bytecode that exists, as it does after ``pip install``.
    """
    if hasattr(config, "workerinput"):
        return
    spec = importlib.util.find_spec("runledger")
    for folder in spec.submodule_search_locations or [] if spec else []:
        compileall.compile_dir(folder, quiet=1)


STORAGE_BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


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


@pytest.fixture(scope="session")
def postgres_databases(postgres_server: PostgresServer) -> Iterator[DatabasePool]:
    """This session's pool of prepared databases (see ``tests.support.postgres``)."""
    pool = DatabasePool(postgres_server)
    try:
        yield pool
    finally:
        pool.close()


@pytest.fixture
def postgres_store_url(postgres_databases: DatabasePool) -> Iterator[str]:
    """A URL to a database for this test alone: runledger's tables exist, empty, no events.

    It is what a store left behind the first time it opened a new database, so opening a
    store on it is opening an empty store. Other tests never see it while this one runs, and
    it is reset (or dropped) after it.
    """
    with postgres_databases.lend() as url:
        yield url


@pytest.fixture(scope="session")
def pgbouncer() -> Iterator[PgBouncer]:
    """A PgBouncer in transaction mode in front of a throwaway cluster of this test session
    (both started here and stopped at its end; skipped without the binaries, failed in CI)."""
    binaries_or_skip(POSTGRES_BIN / "initdb")
    root = owned_scratch_folder("runledger-pooler-")
    with throwaway(ThrowawayCluster(root)) as cluster, pooled(cluster, root) as bouncer:
        yield bouncer


@pytest.fixture(scope="session")
def pgbouncer_databases(pgbouncer: PgBouncer) -> Iterator[DatabasePool]:
    """Prepared databases of the pooler's cluster, lent and reset as ``postgres_databases``."""
    admin = pgbouncer.server.admin()
    pool = DatabasePool(PostgresServer(pgbouncer.server.url("postgres"), admin))
    try:
        yield pool
    finally:
        pool.close()
        admin.close()


@pytest.fixture
def pgbouncer_store_url(pgbouncer: PgBouncer, pgbouncer_databases: DatabasePool) -> Iterator[str]:
    """A URL through the pooler (``pooler=transaction``) to a database for this test alone."""
    with pgbouncer_databases.lend() as direct:
        database = direct.rsplit("/", 1)[1]
        yield pgbouncer.url(database)
        # The pooler keeps server sessions open for reuse; the database is reset only once
        # nothing is connected to it.
        pgbouncer.disconnect(database)


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
    # The target is taken now, not on the first call: a fixture requested during the test
    # would be torn down before this one, under storages that are still open.
    target = ""
    if storage_backend == "sqlite":
        target = str(request.getfixturevalue("sqlite_path"))
    elif storage_backend == "postgresql":
        target = str(request.getfixturevalue("postgres_store_url"))
    opened: list[EventStorage] = []

    def open_one() -> EventStorage:
        storage: EventStorage
        if storage_backend == "memory":
            from runledger.infrastructure.storage.memory import MemoryStorage

            storage = MemoryStorage()
        elif storage_backend == "sqlite":
            from runledger.infrastructure.storage.sqlite import SQLiteStorage

            storage = SQLiteStorage(target)
        else:
            from runledger.infrastructure.storage.postgres import PostgresStorage

            storage = PostgresStorage(target, pool_size=2)
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
