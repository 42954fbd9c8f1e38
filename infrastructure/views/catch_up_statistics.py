"""When the planner's statistics of the live read models are brought up to date after
catch-ups: tables projected live from an empty slot had none until autovacuum came by (up to
a minute on PostgreSQL's defaults), and the planner then took them for tiny.

Measured on PostgreSQL, a queue page of 256 from 30k follow-ups projected live: 3.96 ms (p50)
before any analysis, 1.72 ms after one, as after a build. The count runs over catch-ups, not
per catch-up: a store's follower and a ``projections run`` worker project a large history
in many small catch-ups, one per notification, and with a count per catch-up none of them
ever analysed (the first range reads after 30k follow-ups so projected were planned as a
bitmap scan and a sort of every later follow-up, 4 to 10 ms each, until autovacuum came).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Final

ANALYZE_AFTER_EVENTS: Final = 10_000
"""Catch-ups that projected this many events since the last analysis (and a tenth of the
log, ``ANALYZE_GROWTH``) have the tables analysed (``ViewStore.analyze``)."""
ANALYZE_GROWTH: Final = 10
"""Past the first, an analysis waits for a tenth of the log's length at the last one in new
events, as autovacuum's scale factor does for rows: a long log's statistics move slowly."""


class CatchUpStatistics:
    """Counts the events catch-ups projected and runs ``analyze`` when they are due."""

    def __init__(self, analyze: Callable[[], None]) -> None:
        self._analyze = analyze
        self._lock = threading.Lock()
        self._unanalysed = 0
        self._analysed_at: int | None = None
        """The log position at the last analysis (at the first count: where it began)."""

    def projected(self, read: int, position: int) -> None:
        """Count ``read`` events a catch-up projected, up to ``position``; analyse the tables
        when due."""
        if read <= 0:
            return
        with self._lock:
            if self._analysed_at is None:
                self._analysed_at = max(position - read, 0)
            self._unanalysed += read
            due = self._unanalysed >= max(ANALYZE_AFTER_EVENTS, self._analysed_at // ANALYZE_GROWTH)
            if due:
                self._unanalysed = 0
                self._analysed_at = position
        if due:
            self._analyze()
