"""Processor work between a baseline's commits (``cpu_gaps``): a busy wait of the time asked,
before each run of the command it spaces."""

from __future__ import annotations

import pytest

from runledger.infrastructure.cli.bench import cpu_gaps
from runledger.infrastructure.cli.bench.cpu_gaps import spaced, spin


def test_spin_keeps_looking_at_the_clock_until_the_time_has_passed() -> None:
    readings = iter([10.0, 10.2, 10.4, 10.5, 10.6, 99.0])

    spin(0.5, lambda: next(readings))

    assert next(readings) == 10.6, "returned at the first reading at or past 10.0 + 0.5"


def test_spin_of_no_time_returns_at_once() -> None:
    readings = iter([10.0, 10.0, 99.0])

    spin(0.0, lambda: next(readings))

    assert next(readings) == 99.0


def test_spaced_spins_before_each_run_and_passes_its_number(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls: list[tuple[str, float]] = []
    monkeypatch.setattr(cpu_gaps, "spin", lambda seconds: calls.append(("spin", seconds)))

    def run(number: int) -> int:
        calls.append(("run", number))
        return number * 2

    command = spaced(run, 0.25)

    assert [command(3), command(4)] == [6, 8]
    assert calls == [("spin", 0.25), ("run", 3), ("spin", 0.25), ("run", 4)]
