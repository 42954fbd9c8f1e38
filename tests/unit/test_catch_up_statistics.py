"""When catch-ups have the read models' statistics brought up to date
(``views.catch_up_statistics``): after ``ANALYZE_AFTER_EVENTS`` projected events counted
over any number of catch-ups, and past the first analysis only once the log grew by a tenth
of its length at the last one."""

from __future__ import annotations

from runledger.infrastructure.views.catch_up_statistics import (
    ANALYZE_AFTER_EVENTS,
    CatchUpStatistics,
)


def counted(start: int, reads: list[int]) -> list[int]:
    """The log positions at which ``reads`` (catch-ups from ``start``) had the tables
    analysed."""
    analysed: list[int] = []
    position = start
    statistics = CatchUpStatistics(lambda: analysed.append(position))
    for read in reads:
        position += read
        statistics.projected(read, position)
    return analysed


def test_small_catch_ups_analyse_once_they_add_up_to_the_threshold() -> None:
    step = ANALYZE_AFTER_EVENTS // 4
    assert counted(0, [step] * 9) == [4 * step, 8 * step]


def test_one_catch_up_of_the_threshold_analyses_at_once() -> None:
    assert counted(0, [ANALYZE_AFTER_EVENTS]) == [ANALYZE_AFTER_EVENTS]


def test_catch_ups_that_project_nothing_count_for_nothing() -> None:
    assert counted(0, [0] * 100 + [ANALYZE_AFTER_EVENTS - 1]) == []


def test_on_a_long_log_an_analysis_waits_for_a_tenth_of_it() -> None:
    # A process that opened at position 1M: the statistics it found are autovacuum's, and
    # ANALYZE_AFTER_EVENTS new events are 1 % of the table.
    start = 100 * ANALYZE_AFTER_EVENTS
    step = ANALYZE_AFTER_EVENTS
    analysed = counted(start, [step] * 25)
    assert analysed == [start + 10 * step, start + 21 * step]
