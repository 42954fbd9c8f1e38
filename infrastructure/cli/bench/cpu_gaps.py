"""Work of the processor between commits, for baselines measured as a command would meet them.

On the two-core machines this bench was written on, a commit's wait for the disk (SQLite's
fsync of its WAL) or for the server's WAL flush (PostgreSQL) depended on how long the
process had run before it: single-row SQLite commits took 0.04-0.06 ms (median) back to
back and 0.2-0.6 ms each after 0.3 ms of processor work, and the hand-written ideal of one
``queue_follow_up`` fell from about 2,000 commands/s to 450-540 with 1 ms of work before
each (PostgreSQL: from 1,100 to 410-440). Baselines written back to back get the fast
waits, and every real command, which works before it commits, the slow ones: the bench
therefore also measures the baselines of P1 and P10 with the command's own processor time
spent before each of their commits, so that a reader can tell the design's cost from the
machine's.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def spin(seconds: float, clock: Callable[[], float] = time.perf_counter) -> None:
    """Keep the processor busy for ``seconds`` (a sleep would let it idle, which is not
    what a command's own work before its commit does)."""
    until = clock() + seconds
    while clock() < until:
        pass


def spaced(command: Callable[[int], T], seconds: float) -> Callable[[int], T]:
    """``command``, each run after ``seconds`` of ``spin``."""

    def run(number: int) -> T:
        spin(seconds)
        return command(number)

    return run
