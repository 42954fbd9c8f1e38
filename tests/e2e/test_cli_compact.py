"""``runledger compact`` as an operator runs it: the real module in a subprocess. On SQLite it
gives the pages of dropped tables back to the disk and the store answers as before; on
PostgreSQL it says autovacuum does that; a memory store is refused in one line; a file a
writer holds past the timeout is the retryable storage error (called in-process, to hold
the lock from the test)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from runledger.domain.errors import StorageUnavailableError
from runledger.infrastructure.cli.compaction import compact_store
from runledger.infrastructure.store import open_store
from tests.support.cli import runledger


def grown_and_shrunk(url: str) -> dict[str, str]:
    """A store whose rebuilt read models dropped their old tables, leaving free pages; the
    digests of its read models."""
    with open_store(url) as store:
        for number in range(200):
            run_id = f"run-{number}"
            store.create_run(run_id, workflow_name="echo", input={"text": "x" * 2000})
            store.finish_run(run_id, status="completed", final_output={"text": "y" * 2000})
        for name in store.projection_names():
            # The rebuild switches to new tables and drops the old ones.
            store.rebuild_projection(name)
        return {name: store.read_model_digest(name) for name in store.projection_names()}


def test_compact_gives_a_sqlite_stores_free_pages_back_and_keeps_every_answer(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    digests = grown_and_shrunk(url)

    outcome = runledger("compact", "--url", url, "--json", cwd=tmp_path)

    assert outcome.returncode == 0, outcome
    report = outcome.json()
    assert report["backend"] == "sqlite"
    assert report["after_bytes"] < report["before_bytes"]
    assert path.stat().st_size == report["after_bytes"]
    with open_store(url) as store:
        assert {name: store.read_model_digest(name) for name in store.projection_names()} == (
            digests
        )
        assert store.get_run("run-199") is not None


def test_compact_prints_the_sizes_before_and_after_on_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    grown_and_shrunk(url)

    outcome = runledger("compact", "--url", url, cwd=tmp_path)

    assert outcome.returncode == 0, outcome
    [line] = outcome.stdout.splitlines()
    assert line.startswith(f"{url}: ")
    assert " bytes before, " in line
    assert line.endswith("freed); VACUUM rewrote the file")


@pytest.mark.postgres
def test_compact_on_postgresql_leaves_it_to_autovacuum(
    postgres_store_url: str, tmp_path: Path
) -> None:
    with open_store(postgres_store_url) as store:
        store.create_run("run-1", workflow_name="echo", input={})

    outcome = runledger("compact", "--url", postgres_store_url, "--json", cwd=tmp_path)

    assert outcome.returncode == 0, outcome
    report = outcome.json()
    assert (report["backend"], report["before_bytes"], report["after_bytes"]) == (
        "postgresql",
        None,
        None,
    )
    assert "autovacuum" in report["note"]


def test_compact_of_a_memory_store_is_one_line_and_exit_two(tmp_path: Path) -> None:
    outcome = runledger("compact", "--url", "memory://", cwd=tmp_path)

    assert outcome.returncode == 2, outcome
    assert outcome.stderr.splitlines() == [
        "error [compact.unsupported-url]: runledger compact works on a SQLite or PostgreSQL "
        "store, not memory://"
    ]


def test_compact_while_a_writer_holds_the_file_is_the_retryable_storage_error(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    grown_and_shrunk(url)
    writer = sqlite3.connect(path, isolation_level=None)
    writer.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(StorageUnavailableError, match="database is locked") as caught:
            compact_store(url, "sqlite", timeout=0.1)
    finally:
        writer.execute("ROLLBACK")
        writer.close()

    assert caught.value.retryable
    with open_store(url) as store:
        assert store.get_run("run-0") is not None
