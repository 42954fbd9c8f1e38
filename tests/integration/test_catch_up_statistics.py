"""Catch-ups that project many events bring the planner's statistics of the tables they
wrote up to date (``views.catch_up_statistics``), however many catch-ups the events took:
tables projected live from an empty slot had none until autovacuum came by, and a queue page
read from them took twice as long. PostgreSQL keeps such statistics; SQLite's planner needs
none."""

from __future__ import annotations

import pytest

from runledger.infrastructure.cli.bench.baselines import plain_connection
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views import catch_up_statistics
from runledger.infrastructure.views.worker import ProjectionWorker
from runledger.projections.follow_up_queue import FOLLOW_UPS

THRESHOLD = 30
"""Below autovacuum's own (50 changed rows and more), so only the catch-up can analyse."""


def analysed_rows(runtime: StoreRuntime, url: str) -> tuple[float, int]:
    """The live follow-ups table's row count as its statistics last saw it
    (``pg_class.reltuples``: -1 until first analysed, or what a reused test database's last
    analysis saw), and its row count now."""
    physical = runtime.views.physical_name(FOLLOW_UPS, runtime.views.active_slot(FOLLOW_UPS))
    with plain_connection(url) as connection:
        row = connection.execute(
            "SELECT reltuples FROM pg_class WHERE oid = to_regclass(quote_ident(%s))",
            (physical,),
        ).fetchone()
        count = connection.execute(f'SELECT count(*) FROM "{physical}"').fetchone()
    assert row is not None, physical
    return float(row[0]), int(count[0])


def catch_up_after_one_commit(url: str, follow_ups: int) -> tuple[int, tuple[float, int]]:
    """Events read by a catch-up after one commit of a run with ``follow_ups`` follow-ups
    (one transaction: whichever thread catches up reads them all at once), and then the
    follow-ups table's analysed row count."""
    with open_runtime(url) as runtime:
        events = HistoryGenerator(prefix="stats").run_events(follow_ups)
        runtime.storage.events.insert_events(events)
        read = runtime.catch_up()
        return read, analysed_rows(runtime, url)


@pytest.mark.postgres
def test_a_catch_up_of_many_events_leaves_its_tables_analysed(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catch_up_statistics, "ANALYZE_AFTER_EVENTS", THRESHOLD)

    read, (seen, rows) = catch_up_after_one_commit(postgres_store_url, 13)

    assert read >= THRESHOLD or read == 0, "the follower may have caught up first"
    assert (seen, rows) == (13, 13)


@pytest.mark.postgres
def test_catch_ups_each_below_the_threshold_analyse_once_they_pass_it_together(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catch_up_statistics, "ANALYZE_AFTER_EVENTS", THRESHOLD)
    events = HistoryGenerator(prefix="parts").run_events(13)
    # A follower that hears of each commit catches up with it alone: 13 events each here.
    parts = [events[:13], events[13:26], events[26:39]]
    with open_runtime(postgres_store_url, embedded_projections=False) as runtime:
        seen: list[tuple[float, int]] = []
        for part in parts:
            runtime.storage.events.insert_events(part)
            assert 0 < runtime.catch_up() < THRESHOLD
            seen.append(analysed_rows(runtime, postgres_store_url))

    # Not after the first 13 events, nor after 26, but once 30 and more had come.
    assert [analysed == rows for analysed, rows in seen] == [False, False, True]


@pytest.mark.postgres
def test_a_projection_worker_analyses_the_tables_it_fills(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catch_up_statistics, "ANALYZE_AFTER_EVENTS", THRESHOLD)
    with open_runtime(postgres_store_url, embedded_projections=False) as runtime:
        # 17: no other test here leaves that count in a reused database's statistics.
        runtime.storage.events.insert_events(HistoryGenerator(prefix="worker").run_events(17))
        worker = ProjectionWorker(runtime, poll_seconds=0.05)
        passes: list[int] = []

        def stop_when_idle(read: int) -> None:
            passes.append(read)
            if not read:
                worker.stop()

        worker.on_pass = stop_when_idle
        worker.run()

        assert sum(passes) >= THRESHOLD
        assert analysed_rows(runtime, postgres_store_url) == (17, 17)


@pytest.mark.postgres
def test_a_small_catch_up_leaves_the_statistics_to_autovacuum(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catch_up_statistics, "ANALYZE_AFTER_EVENTS", THRESHOLD)

    read, (seen, rows) = catch_up_after_one_commit(postgres_store_url, 3)

    assert read < THRESHOLD
    assert rows == 3
    assert seen != 3, "not analysed since these rows came"


def test_a_catch_up_of_many_events_projects_them_on_every_backend(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(catch_up_statistics, "ANALYZE_AFTER_EVENTS", THRESHOLD)
    with open_runtime(store_url) as runtime:
        runtime.storage.events.insert_events(HistoryGenerator(prefix="all").run_events(13))
        runtime.catch_up()
        queue = WorkflowStore(runtime).follow_up_queue("all-run-1")

    assert queue is not None
    assert len(queue.follow_ups) == 13


def test_statistics_that_cannot_be_updated_cost_the_catch_up_nothing(
    store_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(catch_up_statistics, "ANALYZE_AFTER_EVENTS", THRESHOLD)
    with open_runtime(store_url, embedded_projections=False) as runtime:
        runtime.storage.events.insert_events(HistoryGenerator(prefix="fail").run_events(13))

        def refuse(slots: object) -> None:
            raise RuntimeError("a slot another process dropped")

        monkeypatch.setattr(runtime.views, "analyze", refuse)
        read = runtime.catch_up()
        queue = WorkflowStore(runtime).follow_up_queue("fail-run-1")
        errors = [status.last_error for status in runtime.projection_status()]

    assert read >= THRESHOLD
    assert queue is not None
    assert len(queue.follow_ups) == 13
    assert "statistics of the read models not updated" in caplog.text
    assert errors == [None] * len(errors), "the catch-up itself succeeded"
