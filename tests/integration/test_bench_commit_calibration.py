"""The bench's database workloads: single-row commits into a new table of a scratch database,
timed by the fastest of their runs back to back and one by one after processor work, on
SQLite (a real file) and PostgreSQL."""

from __future__ import annotations

import os

import pytest

from runledger.infrastructure.cli.bench import calibration
from runledger.infrastructure.cli.bench.baselines import plain_connection
from runledger.infrastructure.cli.bench.calibration import (
    commit_seconds,
    database_times,
    spaced_commit_seconds,
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def empty_url(request: pytest.FixtureRequest, sqlite_path: str) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{sqlite_path}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


def test_the_commits_are_timed_by_their_fastest_run(
    empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "COMMITS", 7)
    ticks = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0])

    assert commit_seconds(empty_url, lambda: next(ticks)) == 1.0

    assert next(ticks, None) is None, "three runs, two readings each"
    with plain_connection(empty_url) as connection:
        rows = connection.execute(
            "SELECT run, count(*) FROM runledger_calibration GROUP BY run ORDER BY run"
        ).fetchall()
    assert [tuple(row) for row in rows] == [(0, 7), (1, 7), (2, 7)]


def test_spaced_commits_are_timed_one_by_one_after_processor_work(
    empty_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(calibration, "SPACED_COMMITS", 3)
    spins: list[float] = []
    monkeypatch.setattr(calibration, "spin", spins.append)
    ticks = iter([0.0, 1.0, 10.0, 13.0, 20.0, 22.0])

    assert spaced_commit_seconds(empty_url, lambda: next(ticks)) == 2.0, "the median"

    assert next(ticks, None) is None, "each commit timed alone"
    assert spins == [calibration.GAP_SECONDS] * 3, "processor work before each commit"
    with plain_connection(empty_url) as connection:
        rows = connection.execute("SELECT n FROM runledger_spaced_calibration ORDER BY n")
        assert [row[0] for row in rows.fetchall()] == [0, 1, 2], "each one committed"


def test_the_commits_go_to_a_scratch_database_dropped_after(empty_url: str) -> None:
    times = database_times(empty_url)

    assert 0 < times.commit_seconds < 60
    assert 0 < times.spaced_commit_seconds < 60
    postgres = not empty_url.startswith("sqlite")
    with plain_connection(empty_url) as connection:
        # The bench URL's own database is left as it was.
        tables = connection.execute(
            "SELECT count(*) FROM pg_tables WHERE tablename LIKE 'runledger\\_%calibration'"
            if postgres
            else "SELECT count(*) FROM sqlite_master WHERE name LIKE 'runledger\\_%calibration' "
            "ESCAPE '\\'"
        ).fetchone()
        assert tables[0] == 0
        if postgres:
            scratch = connection.execute(
                "SELECT count(*) FROM pg_database WHERE datname LIKE %s",
                (f"runledger\\_bench\\_{os.getpid()}\\_%",),
            ).fetchone()
            assert scratch[0] == 0
