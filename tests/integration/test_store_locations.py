"""Where ``open_store`` opens a store: URLs and paths, and what it refuses before it writes
anything (an empty path, a missing folder, an unknown scheme, a file that is no database, and
with ``create=False`` a store that does not exist)."""

from __future__ import annotations

import os
from pathlib import Path

import psycopg
import pytest

from runledger.domain.errors import (
    InvalidStoreLocationError,
    InvalidStorePathError,
    InvalidStoreUrlError,
    StoreNotFoundError,
)
from runledger.infrastructure import open_store
from tests.support.postgres import PostgresServer


def make_run(location: object) -> None:
    with open_store(location) as store:  # type: ignore[arg-type]
        store.create_run("run-1", workflow_name="review", input={})


@pytest.mark.parametrize("kind", ["pathlib", "plain text", "absolute text"])
def test_a_path_names_a_sqlite_file(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    location = {
        "pathlib": Path("state.db"),
        "plain text": "state.db",
        "absolute text": str(tmp_path / "state.db"),
    }[kind]
    make_run(location)
    with open_store(f"sqlite:///{tmp_path / 'state.db'}", create=False) as store:
        assert store.get_run("run-1") is not None


def test_an_empty_sqlite_path_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidStorePathError, match="names no file"):
        open_store("sqlite:///")
    assert os.listdir(tmp_path) == []


def test_a_missing_folder_is_refused_and_says_the_path_is_relative(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidStorePathError) as raised:
        open_store("sqlite:///missing/dir/x.db")
    assert raised.value.code == "store.invalid-path"
    assert f"the folder {tmp_path}/missing/dir does not exist" in str(raised.value)
    assert f"read from the current folder {tmp_path}" in str(raised.value)
    assert os.listdir(tmp_path) == []


def test_a_folder_is_not_a_store_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidStorePathError, match="names a folder"):
        open_store(tmp_path)


def test_a_file_that_is_no_database_is_refused_by_name(tmp_path: Path) -> None:
    garbage = tmp_path / "notes.db"
    garbage.write_text("these are my notes, not a database\n" * 20)
    with pytest.raises(InvalidStorePathError, match="not a SQLite database"):
        open_store(garbage)
    assert garbage.read_text().startswith("these are my notes")


@pytest.mark.parametrize("url", ["ftp://x/y", "mysql://root@localhost/db", "memory://extra"])
def test_an_unknown_scheme_is_refused(url: str) -> None:
    with pytest.raises(InvalidStoreUrlError, match="Unsupported store URL"):
        open_store(url)


@pytest.mark.parametrize("location", [123, b"sqlite:///x.db", ["x.db"], 1.5])
def test_a_location_of_another_type_is_refused_naming_it(location: object) -> None:
    with pytest.raises(InvalidStoreLocationError) as raised:
        open_store(location)  # type: ignore[arg-type]
    assert type(location).__name__ in str(raised.value)


def test_without_create_a_missing_sqlite_file_is_not_made(tmp_path: Path) -> None:
    target = tmp_path / "typo.db"
    with pytest.raises(StoreNotFoundError) as raised:
        open_store(f"sqlite:///{target}", create=False)
    assert raised.value.code == "store.not-found"
    assert str(target) in str(raised.value)
    assert not target.exists()


def test_by_default_a_missing_sqlite_file_is_created_owner_only(tmp_path: Path) -> None:
    target = tmp_path / "new.db"
    make_run(target)
    assert target.stat().st_mode & 0o077 == 0


@pytest.mark.postgres
def test_without_create_a_database_without_runledger_tables_is_refused(
    postgres_server: PostgresServer,
) -> None:
    name = postgres_server.new_database_name()
    url = postgres_server.create_database(name)
    try:
        with pytest.raises(StoreNotFoundError, match="has no runledger tables"):
            open_store(url, create=False)
        with psycopg.connect(url) as connection:
            row = connection.execute(
                "SELECT count(*) FROM pg_tables WHERE schemaname = 'public'"
            ).fetchone()
        assert row == (0,), "a refused open must not have made tables"
        with open_store(url) as store:  # creating is the default
            store.create_run("run-1", workflow_name="review", input={})
        with open_store(url, create=False) as store:
            assert store.get_run("run-1") is not None
    finally:
        postgres_server.drop_database(name)


@pytest.mark.postgres
def test_without_create_an_existing_postgresql_store_opens(postgres_store_url: str) -> None:
    with open_store(postgres_store_url, create=False) as store:
        assert store.list_runs().runs == []
