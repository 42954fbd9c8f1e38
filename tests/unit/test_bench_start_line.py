"""Processes the bench measures together begin together, however long each takes to set up."""

from __future__ import annotations

import os
import time
from typing import Any

import pytest

from runledger.infrastructure.cli.bench.baselines import StartLine, at_once

SETUP_SECONDS = (0.0, 0.4, 1.8)
"""How long each process sets up before it comes to the line: the last one past the second
the bench used to wait before it let them go."""


def _timed_start(setup: float, start: StartLine, results: Any) -> None:
    time.sleep(setup)
    ready = time.time()
    start.wait()
    results.put((setup, ready, time.time()))


def _dies_before_the_line(start: StartLine, results: Any) -> None:
    os._exit(3)


def test_every_process_begins_once_the_slowest_is_ready() -> None:
    outcomes = at_once(_timed_start, [(setup,) for setup in SETUP_SECONDS])

    assert sorted(setup for setup, _, _ in outcomes) == list(SETUP_SECONDS)
    slowest_ready = max(ready for _, ready, _ in outcomes)
    begins = [began for _, _, began in outcomes]
    assert min(begins) >= slowest_ready
    # Released together: one event set once, not each at its own readiness.
    assert max(begins) - min(begins) < 0.25


def test_a_process_that_dies_before_the_line_fails_the_measurement_rather_than_hanging() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match=r"exit codes \[3\]"):
        at_once(_dies_before_the_line, [()])
    assert time.monotonic() - started < 30
