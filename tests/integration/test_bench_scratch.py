"""The bench's scratch databases are gone when it ends, even while something still connects."""

from __future__ import annotations

import threading
from pathlib import Path
from urllib.parse import urlsplit

import psycopg

from runledger.infrastructure.cli.bench.baselines import plain_connection
from runledger.infrastructure.cli.bench.runner import Scratch
from runledger.infrastructure.storage.urls import libpq_url
from tests.support.postgres import PostgresServer


def _exists(server: PostgresServer, name: str) -> bool:
    row = server.connection.execute(
        "SELECT count(*) FROM pg_database WHERE datname = %s", (name,)
    ).fetchone()
    return row is not None and row[0] == 1


def test_close_drops_a_database_that_a_client_keeps_reconnecting_to(
    postgres_url: str, postgres_server: PostgresServer
) -> None:
    scratch = Scratch(postgres_url)
    url = scratch.new_url()
    name = urlsplit(url).path.lstrip("/")
    held = psycopg.connect(libpq_url(url))
    held.execute("BEGIN")
    stop = threading.Event()
    connected = threading.Event()
    reconnects = 0

    def reconnect() -> None:
        # A worker that survives the bench's end and comes back at once whenever its
        # session is ended, holding the new one, as a pool does.
        nonlocal reconnects
        while not stop.is_set():
            try:
                with psycopg.connect(libpq_url(url), connect_timeout=2) as connection:
                    reconnects += 1
                    connected.set()
                    # Ended by the server at once when its session is terminated.
                    connection.execute("SELECT pg_sleep(30)")
            except psycopg.Error:
                if not _exists(postgres_server, name):
                    return

    workers = [threading.Thread(target=reconnect) for _ in range(4)]
    for worker in workers:
        worker.start()
    try:
        assert connected.wait(10)
        scratch.close()
    finally:
        stop.set()
        for worker in workers:
            worker.join(40)
        held.close()

    assert reconnects > 0
    assert not _exists(postgres_server, name)


def test_close_removes_the_sqlite_folder(tmp_path: Path) -> None:
    scratch = Scratch(f"sqlite:///{tmp_path / 'bench.db'}")
    url = scratch.new_url()
    with plain_connection(url) as connection:
        connection.execute("CREATE TABLE t (id INTEGER)")
    folder = Path(url.removeprefix("sqlite:///")).parent
    assert folder.exists()

    scratch.close()

    assert not folder.exists()
