"""Opening and closing a store: new SQLite files are owner-only, and closing while other
threads still read waits for them instead of closing connections under their statements."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from uuid import uuid4

import pytest

from runledger.domain.errors import StoreClosedError
from runledger.infrastructure.storage.sqlite import SQLiteStorage
from runledger.infrastructure.store import open_store

PRIVATE = 0o600


@pytest.fixture(params=[0o022, 0o000], ids=["umask-022", "umask-000"])
def umask(request: pytest.FixtureRequest) -> Iterator[int]:
    previous = os.umask(request.param)
    yield request.param
    os.umask(previous)


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_sqlite_store_and_its_wal_files_are_owner_only(umask: int, tmp_path: Path) -> None:
    path = tmp_path / "private.db"
    with open_store(f"sqlite:///{path}") as store:
        store.create_run("run-private", workflow_name="lifecycle", input={})
        files = [path, Path(f"{path}-wal"), Path(f"{path}-shm")]

        assert [mode_of(file) for file in files] == [PRIVATE] * 3


def test_the_aggregate_lock_file_beside_a_sqlite_store_is_owner_only(
    umask: int, tmp_path: Path
) -> None:
    path = tmp_path / "private.db"
    storage = SQLiteStorage(path)
    try:
        with storage.lock_aggregates([uuid4()]):
            assert mode_of(Path(f"{path}-locks")) == PRIVATE
    finally:
        storage.close()


def test_an_existing_sqlite_file_keeps_its_owners_mode(tmp_path: Path) -> None:
    path = tmp_path / "shared.db"
    path.touch()
    path.chmod(0o640)
    with open_store(f"sqlite:///{path}"):
        assert mode_of(path) == 0o640


def test_a_closed_store_refuses_calls_with_a_workflow_error(tmp_path: Path) -> None:
    store = open_store(f"sqlite:///{tmp_path / 'closed.db'}")
    store.close()

    with pytest.raises(StoreClosedError, match="The store is closed"):
        store.get_run("run-after-close")


HAMMER = textwrap.dedent(
    """
    import sys, threading, time
    from runledger.domain.errors import StoreClosedError
    from runledger.infrastructure.store import open_store

    url, rounds = sys.argv[1], int(sys.argv[2])
    for number in range(rounds):
        store = open_store(url)
        store.create_run(f"run-{number}", workflow_name="lifecycle", input={})
        store.bind_origin_session(f"run-{number}", "session")
        failures = []

        def read():
            try:
                while True:
                    store.get_run(f"run-{number}")
                    store.follow_up_queue(f"run-{number}")
                    store.event_log(run_id=f"run-{number}")
                    store.session_outbox("session")
            except StoreClosedError:
                pass
            except BaseException as error:
                failures.append(repr(error))

        readers = [threading.Thread(target=read) for _ in range(4)]
        for reader in readers:
            reader.start()
        time.sleep(0.05)
        store.close()
        for reader in readers:
            reader.join()
        assert not failures, failures
    print("closed", rounds, "times")
    """
)


@pytest.mark.parametrize(
    "backend", ["memory", "sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)]
)
def test_closing_while_threads_read_waits_for_them(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = {
        "memory": lambda: "memory://",
        "sqlite": lambda: f"sqlite:///{tmp_path / 'busy.db'}",
        "postgresql": lambda: request.getfixturevalue("postgres_store_url"),
    }[backend]()
    # In a child process: a crash in sqlite3 would otherwise take the test session with it.
    result = subprocess.run(
        [sys.executable, "-c", HAMMER, url, "5"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() == "closed 5 times"
