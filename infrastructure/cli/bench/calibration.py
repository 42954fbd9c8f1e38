"""How fast the machine ran while the bench did: a fixed pure-Python workload timed before
the first row and after the last.

Rows with absolute goals (P3's events/s, P4/P6/P8/P9's milliseconds) move with the machine:
on one two-core machine the same code rebuilt the bench history at 42.5k events/s one day
and at 17-22k two days later, when a loop of 10M additions took 1.1-1.2 s. Ratios against
baselines measured in the same turns absorb that; an absolute figure needs the machine's
speed beside it to be read, and a start and an end far apart say the machine drifted.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final

ADDITIONS: Final = 2_000_000
"""The loop's additions: about 0.2 s a run on the machines this bench was written on."""
RUNS: Final = 3


def loop_seconds(clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of ``RUNS`` runs of the loop, in seconds (the fastest: another process
    taking the core for a moment slows one run, never speeds one up)."""
    best = float("inf")
    for _ in range(RUNS):
        started = clock()
        total = 0
        for number in range(ADDITIONS):
            total += number
        best = min(best, clock() - started)
    return best


@dataclass(frozen=True)
class Calibration:
    """The loop's time before the first row and after the last."""

    additions: int
    start_seconds: float
    end_seconds: float

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"machine: a pure-Python loop of {self.additions:,} additions took "
            f"{self.start_seconds:.3f} s before the first row and {self.end_seconds:.3f} s "
            "after the last"
        )
