"""The bench reports the machine's speed beside its rows: a fixed loop's, a fixed walk's
through memory and a fixed run of database commits' times before the first row and after the
last, in the JSON document and under the table."""

from __future__ import annotations

import io
import itertools
import json

import pytest
from rich.console import Console

from runledger.infrastructure.cli.bench import calibration
from runledger.infrastructure.cli.bench.calibration import (
    Calibration,
    loop_seconds,
    walk_order,
    walk_seconds,
)
from runledger.infrastructure.cli.bench.report import BenchOutcome, print_bench
from runledger.infrastructure.cli.bench.runner import BenchResult

ROW = BenchResult("P7", "a row", 1.0, "MB", 2.0, 0.5, "<= 1 x", True)
MACHINE = Calibration(
    2_000_000, 0.125, 0.25, 400_000, 1.5, 2.25, 1_000, 0.5, 0.75, 0.5, 0.375, 0.625
)


def test_the_loop_is_timed_by_its_fastest_run(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 3.0, 10.0, 11.0, 20.0, 22.0])
    monkeypatch.setattr(calibration, "ADDITIONS", 10)

    assert loop_seconds(lambda: next(ticks)) == 1.0
    assert next(ticks, None) is None, "three runs, two readings each"


def test_the_walk_is_timed_by_its_fastest_run(monkeypatch: pytest.MonkeyPatch) -> None:
    ticks = iter([0.0, 4.0, 10.0, 12.0, 20.0, 23.0])
    monkeypatch.setattr(calibration, "WALK_OBJECTS", 1_000)

    assert walk_seconds(lambda: next(ticks)) == 2.0
    assert next(ticks, None) is None, "three runs, two readings each"


def test_the_walk_visits_every_object_once_in_the_same_scattered_order() -> None:
    order = walk_order(10_000)

    assert sorted(order) == list(range(10_000))
    assert order == walk_order(10_000), "every run, and every bench, walks alike"
    next_door = sum(abs(a - b) == 1 for a, b in itertools.pairwise(order))
    assert next_door < 10, "scattered: an object's neighbour is almost never the next step"


def test_the_json_document_carries_the_machine(capsys: pytest.CaptureFixture[str]) -> None:
    print_bench(BenchOutcome("sqlite", [ROW], MACHINE), Console(), as_json=True)

    document = json.loads(capsys.readouterr().out)

    assert document["machine"] == {
        "additions": 2_000_000,
        "start_seconds": 0.125,
        "end_seconds": 0.25,
        "walk_objects": 400_000,
        "walk_start_seconds": 1.5,
        "walk_end_seconds": 2.25,
        "commits": 1_000,
        "commit_start_seconds": 0.5,
        "commit_end_seconds": 0.75,
        "gap_ms": 0.5,
        "spaced_commit_start_ms": 0.375,
        "spaced_commit_end_ms": 0.625,
    }
    assert [row["id"] for row in document["results"]] == ["P7"]


def test_the_table_says_how_fast_the_machine_ran() -> None:
    out = io.StringIO()

    print_bench(BenchOutcome("sqlite", [ROW], MACHINE), Console(file=out, width=200), as_json=False)

    assert (
        "machine: a pure-Python loop of 2,000,000 additions took 0.125 s before the first row "
        "and 0.250 s after the last; a walk over 400,000 objects in random order took 1.500 s "
        "and 2.250 s; 1,000 single-row commits took 0.500 s and 0.750 s back "
        "to back; one after 0.5 ms of processor work took 0.375 ms and 0.625 ms (median)"
    ) in " ".join(out.getvalue().split())
