"""How fast the machine ran while the bench did: two fixed pure-Python workloads and a fixed
database workload, each timed before the first row and after the last.

Rows with absolute goals (P3's events/s, P4/P6/P8/P9's milliseconds) move with the machine:
on one two-core machine the same code rebuilt the bench history at 42.5k events/s one day
and at 17-22k two days later, when a loop of 10M additions took 1.1-1.2 s. Ratios against
baselines measured in the same turns absorb that; an absolute figure needs the machine's
speed beside it to be read, and a start and an end far apart say the machine drifted.

The loop measures the processor alone, within its caches. A machine can be slower than the
loop says: late on 2026-12-07 the loop took 0.12-0.14 s, against 0.06-0.10 s that evening,
while the rows fell 3-4x (P3 from 35.7k to 11.5k events/s on SQLite, P1 from 825 to 194
commands/s), and ``walk_seconds`` took 0.67-0.72 s, 12 times as long as as many steps over
10,000 objects, which the caches hold (memory that the host's other guests kept busy). The
rows build, decode and cache many objects, so the bench also times this walk, which waits
for memory more than for the processor.

Rows bound by the database drifted while it held
steady (P6 on SQLite gave a p99 of 3.8 ms, then 6.5-8.0 ms within the hour, the loop's time
unchanged), so the bench also times single-row commits to a scratch database of its backend:
each waits for the disk (SQLite) or for a round trip and the server's WAL flush (PostgreSQL).
They are timed back to back, and one by one after ``GAP_SECONDS`` of processor work each
(``cpu_gaps``): on the machines this bench was written on the second wait was 4-10 times the
first, and every real command meets the second.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Final

from runledger.infrastructure.cli.bench.baselines import plain_connection
from runledger.infrastructure.cli.bench.cpu_gaps import spin
from runledger.infrastructure.cli.bench.runner import Scratch

ADDITIONS: Final = 2_000_000
"""The loop's additions: about 0.2 s a run on the machines this bench was written on."""
RUNS: Final = 3
WALK_OBJECTS: Final = 400_000
"""The objects of the walk: some 50 MB, more than a processor's caches hold."""
COMMITS: Final = 1_000
"""Single-row commits of the database workload: a run took 0.13 s on SQLite and 0.19 s on
PostgreSQL on the two-core machine this bench was written on."""
SPACED_COMMITS: Final = 200
"""Single-row commits timed one by one, each after ``GAP_SECONDS`` of processor work."""
GAP_SECONDS: Final = 0.0005
"""About half of one ``queue_follow_up``'s own processor time on those machines."""


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


def walk_seconds(clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of ``RUNS`` walks over ``WALK_OBJECTS`` small objects in a fixed random
    order, in seconds: each step reads an object the caches most likely do not hold."""
    objects = [[number] for number in range(WALK_OBJECTS)]
    order = walk_order(WALK_OBJECTS)
    best = float("inf")
    for _ in range(RUNS):
        started = clock()
        total = 0
        for index in order:
            total += objects[index][0]
        best = min(best, clock() - started)
    return best


def walk_order(count: int) -> list[int]:
    """The walk's order over ``count`` objects: each once, in the same random order every run
    (in their own order, the processor would read ahead and the walk wait for nothing)."""
    order = list(range(count))
    random.Random(count).shuffle(order)  # noqa: S311 - the same order every run
    return order


@dataclass(frozen=True)
class ProcessorTimes:
    """``loop_seconds`` and ``walk_seconds`` at one moment."""

    loop_seconds: float
    walk_seconds: float


def processor_times() -> ProcessorTimes:
    """The loop's and the walk's times now."""
    return ProcessorTimes(loop_seconds(), walk_seconds())


def commit_seconds(url: str, clock: Callable[[], float] = time.perf_counter) -> float:
    """The fastest of ``RUNS`` runs of ``COMMITS`` single-row commits into a new table of the
    database at ``url``, connected as the baselines are (``plain_connection``)."""
    mark = "?" if url.startswith("sqlite:///") else "%s"
    insert = f"INSERT INTO runledger_calibration VALUES ({mark}, {mark}, {mark})"
    body = "x" * 200
    best = float("inf")
    with plain_connection(url) as connection:
        connection.execute("CREATE TABLE runledger_calibration (run integer, n integer, body text)")
        for run in range(RUNS):
            started = clock()
            for number in range(COMMITS):
                connection.execute(insert, (run, number, body))
            best = min(best, clock() - started)
    return best


def spaced_commit_seconds(url: str, clock: Callable[[], float] = time.perf_counter) -> float:
    """The median of ``SPACED_COMMITS`` single-row commits into a new table of the database at
    ``url``, each timed alone after ``GAP_SECONDS`` of ``spin``."""
    mark = "?" if url.startswith("sqlite:///") else "%s"
    insert = f"INSERT INTO runledger_spaced_calibration VALUES ({mark}, {mark})"
    body = "x" * 200
    times = []
    with plain_connection(url) as connection:
        connection.execute("CREATE TABLE runledger_spaced_calibration (n integer, body text)")
        for number in range(SPACED_COMMITS):
            spin(GAP_SECONDS)
            started = clock()
            connection.execute(insert, (number, body))
            times.append(clock() - started)
    return statistics.median(times)


@dataclass(frozen=True)
class DatabaseTimes:
    """``commit_seconds`` and ``spaced_commit_seconds`` of one scratch database."""

    commit_seconds: float
    spaced_commit_seconds: float


def database_times(url: str) -> DatabaseTimes:
    """The database workloads in a scratch database of the bench URL's backend, dropped
    after."""
    scratch = Scratch(url)
    try:
        scratch_url = scratch.new_url()
        return DatabaseTimes(commit_seconds(scratch_url), spaced_commit_seconds(scratch_url))
    finally:
        scratch.close()


@dataclass(frozen=True)
class Calibration:
    """The loop's, the walk's and the commits' times before the first row and after the
    last."""

    additions: int
    start_seconds: float
    end_seconds: float
    walk_objects: int
    walk_start_seconds: float
    walk_end_seconds: float
    commits: int
    commit_start_seconds: float
    commit_end_seconds: float
    gap_ms: float
    spaced_commit_start_ms: float
    spaced_commit_end_ms: float

    @classmethod
    def of(
        cls,
        start: ProcessorTimes,
        end: ProcessorTimes,
        at_start: DatabaseTimes,
        at_end: DatabaseTimes,
    ) -> Calibration:
        """The figures of the processor's and the database's runs before and after the rows."""
        return cls(
            ADDITIONS,
            start.loop_seconds,
            end.loop_seconds,
            WALK_OBJECTS,
            start.walk_seconds,
            end.walk_seconds,
            COMMITS,
            at_start.commit_seconds,
            at_end.commit_seconds,
            GAP_SECONDS * 1000,
            at_start.spaced_commit_seconds * 1000,
            at_end.spaced_commit_seconds * 1000,
        )

    def as_json(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        return (
            f"machine: a pure-Python loop of {self.additions:,} additions took "
            f"{self.start_seconds:.3f} s before the first row and {self.end_seconds:.3f} s "
            f"after the last; a walk over {self.walk_objects:,} objects in random order took "
            f"{self.walk_start_seconds:.3f} s and {self.walk_end_seconds:.3f} s; "
            f"{self.commits:,} single-row commits took "
            f"{self.commit_start_seconds:.3f} s and {self.commit_end_seconds:.3f} s back to "
            f"back; one after {self.gap_ms:g} ms of processor work took "
            f"{self.spaced_commit_start_ms:.3f} ms and {self.spaced_commit_end_ms:.3f} ms (median)"
        )
