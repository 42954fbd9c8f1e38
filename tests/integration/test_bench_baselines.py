"""The bench's baselines do the work they claim, on SQLite and PostgreSQL, and other modules'
rows join the bench through its one registration point."""

from __future__ import annotations

import re
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from uuid import UUID

import pytest
from eventsourcing.application import Application

from runledger.infrastructure.cli.bench.baselines import (
    EVENTS_TABLE,
    IdealCommand,
    LibraryBaseline,
    at_once,
    plain_connection,
)
from runledger.infrastructure.cli.bench.runner import Bench, BenchResult
from tests.support.bench import DURABLE, durable_bench


@pytest.fixture(params=DURABLE)
def bench(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Bench]:
    """A bench on the backend, whose scratch databases go when the test ends."""
    with durable_bench(request, tmp_path_factory, events=100) as opened:
        yield opened


def count(url: str, table: str) -> int:
    with plain_connection(url) as connection:
        found: int = connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        return found


def topics(ideal: IdealCommand) -> list[Any]:
    return [
        dict(zip(write.columns, write.values, strict=True))["topic"]
        for write in ideal.writes
        if write.table == EVENTS_TABLE
    ]


def test_the_ideal_writes_the_three_events_of_a_queued_follow_up(bench: Bench) -> None:
    ideal = bench.ideal_queue()

    assert topics(ideal) == [
        "run.follow-up-accepted",
        "follow-up.queued",
        "workflow-message.created",
    ]


def logical(table: str) -> str:
    """A view table's logical name, from the active slot's physical one (``<name>_v4_1``)."""
    return re.sub(r"_v[0-9]+_[0-9]+$", "", table)


def test_the_ideal_writes_every_view_row_the_command_wrote(bench: Bench) -> None:
    ideal = bench.ideal_queue()

    tables = {logical(write.table) for write in ideal.writes if write.table != EVENTS_TABLE}
    assert {"rl_fuq_follow_ups", "rl_vd_runs", "rl_vd_revisions", "rl_so_messages"} <= tables


def test_each_ideal_command_adds_three_events_and_moves_tracking(bench: Bench) -> None:
    ideal = bench.ideal_queue()
    before = count(ideal.url, EVENTS_TABLE)

    rate = ideal.rate(0.2)

    added = count(ideal.url, EVENTS_TABLE) - before
    assert rate > 0
    assert added > 0
    assert added % 3 == 0


def test_writers_of_the_ideal_write_rows_of_their_own(bench: Bench) -> None:
    ideal = bench.ideal_queue()

    first, second = ideal.for_writer(0), ideal.for_writer(1)

    run_rows = [
        (write_a.values, write_b.values)
        for write_a, write_b in zip(first.writes, second.writes, strict=True)
        if logical(write_a.table) == "rl_vd_runs"
    ]
    assert run_rows
    assert all(a[0] != b[0] for a, b in run_rows)


def test_the_library_baseline_saves_one_event_per_command(bench: Bench) -> None:
    url = bench.scratch.new_url()

    baseline = LibraryBaseline(url)

    rate = baseline.rate(0.2)

    app: Application[UUID] = Application(env=baseline.environment())
    try:
        saved = app.recorder.max_notification_id() or 0
    finally:
        app.close()
    assert rate > 0
    # The aggregate's creation, then one event per save.
    assert saved >= 2


def test_an_extra_row_joins_the_bench_and_one_for_another_backend_is_left_out(
    bench: Bench,
) -> None:
    def measured(on: Bench) -> BenchResult:
        time.sleep(0.05)
        return BenchResult("X1", "an extra row", 1.0, "x", 2.0, 0.5, "report", True)

    def elsewhere(on: Bench) -> BenchResult | None:
        return None

    bench.extra_rows = [("X1", measured), ("X2", elsewhere)]
    bench.only = {"X1", "X2"}

    [result] = bench.run()

    assert result.as_json()["id"] == "X1"
    assert result.as_json()["baselines"] == {"raw": 2.0}
    assert result.as_json()["ratios"] == {"raw": 0.5}
    # How long the row took, as the run measured it around the row's own work.
    assert result.seconds is not None
    assert 0.05 <= result.seconds < 5


@pytest.mark.slow
def test_every_turn_of_four_writers_queues_new_follow_ups(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runledger.infrastructure.cli.bench import runner
    from runledger.infrastructure.store import open_store

    counts: list[int] = []
    outcomes = at_once

    def counted(target: Any, args: list[tuple[Any, ...]]) -> list[Any]:
        found = outcomes(target, args)
        counts.extend(outcome[0] for outcome in found)
        return found

    monkeypatch.setattr(runner, "at_once", counted)
    url = bench.scratch.new_url()
    with open_store(url) as store:
        store.create_run("turns", workflow_name="bench", input={})
        store.bind_origin_session("turns", "turns-session")
    for turn in range(2):
        bench._four_writers(["turns"] * 4, url=url, seconds=0.3, turn=turn)

    with open_store(url) as store:
        queue = store.follow_up_queue("turns")
    assert queue is not None
    # A request id queued again would be adopted: a read, not the command measured.
    warmed = 2 * 4 * runner.WARM_UP_COMMANDS
    assert len(queue.follow_ups) == sum(counts) + warmed
    assert sum(counts) > 0


def test_four_ideal_writers_at_once_never_deadlock_and_every_tracking_move_lands(
    bench: Bench,
) -> None:
    ideal = bench.ideal_queue()
    writers = [ideal.for_writer(number) for number in range(4)]
    with plain_connection(ideal.url) as connection:
        before = connection.execute(
            "SELECT sum(position) FROM runledger_view_slots WHERE state = 'active'"
        ).fetchone()[0]
        slots = connection.execute(
            "SELECT count(*) FROM runledger_view_slots WHERE state = 'active'"
        ).fetchone()[0]
    events = count(ideal.url, EVENTS_TABLE)

    with ThreadPoolExecutor(4) as pool:
        rates = list(pool.map(lambda writer: writer.rate(1.0, first=10_000), writers))

    written = (count(ideal.url, EVENTS_TABLE) - events) // 3
    with plain_connection(ideal.url) as connection:
        after = connection.execute(
            "SELECT sum(position) FROM runledger_view_slots WHERE state = 'active'"
        ).fetchone()[0]
    assert all(rate > 0 for rate in rates)
    assert after - before == written * ideal.tracked * slots
    assert sum(writer.deadlocks for writer in writers) == 0


def test_p4_measures_the_worker_only_once_it_projects_and_gives_up_on_a_worker_that_never_does(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runledger.infrastructure.cli.bench import runner
    from runledger.infrastructure.store import open_store

    result = bench.p4_visibility()
    # Every sample of each mode found its follow-up: none waited for a worker still starting.
    assert result.value < 1000
    modes = ("embedded", "worker") if bench.backend == "postgresql" else ("embedded",)
    assert [mode for mode in modes if f"{mode} p50" in result.name] == list(modes)

    monkeypatch.setattr(runner, "WORKER_START_SECONDS", 0.5)
    url = bench.scratch.new_url()
    with (
        open_store(url, embedded_projections=False) as writer,
        open_store(url, embedded_projections=False) as reader,
        pytest.raises(TimeoutError, match="never projected"),
    ):
        runner._await_worker(writer, reader)


def test_p5_times_each_late_follow_up_beside_an_early_one_of_a_young_run(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runledger.infrastructure.cli.bench import runner

    timed: list[tuple[str, int]] = []
    measure = runner._timed

    def recorded(command: Any) -> float:
        _, run_id, _, number = command.args
        timed.append((run_id, number))
        return measure(command)

    monkeypatch.setattr(runner, "_timed", recorded)
    result = bench.p5_history_cost()

    total, window = bench.history_follow_ups, 100
    assert len(timed) == 2 * window
    pairs = [timed[index : index + 2] for index in range(0, len(timed), 2)]
    # Each pair holds one command of each kind, and the order alternates.
    assert all(sorted(run == "p5" for run, _ in pair) == [False, True] for pair in pairs)
    assert [pair[0][0] == "p5" for pair in pairs[:4]] == [False, True, False, True]
    late = [number for run, number in timed if run == "p5"]
    assert late == list(range(total - window, total))
    # Young run r numbers its follow-ups from total + 15 r; the 6th to 15th are timed.
    early = [(run, number) for run, number in timed if run != "p5"]
    assert early == [
        (f"p5-young-{run}", total + 15 * run + index)
        for run in range(window // 10)
        for index in range(5, 15)
    ]
    assert result.value > 0
    assert f"medians of {window} pairs" in result.name
