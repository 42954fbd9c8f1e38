"""Whether the log has moved past a position: the check a query makes before it answers,
made in the round trip of its first read instead of one of its own.

A query sees every commit made before it started. The process used to read the log past its
projections' position first, project what it found, and only then read the views: on
PostgreSQL a round trip before the query's own (``follow_up_queue_range`` took three,
``list_runs`` two); on SQLite a pooled transaction and the projector's machinery, half of a
one-follow-up page read. The log almost always holds nothing new there, so the query reads
the views at once and the probe goes with its first read (``ViewStore.probing``): in the
same pipeline on PostgreSQL, right after it on the views' connection on SQLite. Found
nothing: the views held every commit made before the query (they are at or past the
position, and whatever committed past it before the query started would be there now); the
answer stands. Found an event: the answer is dropped, and the query catches up and reads
again as before.

Asking after the read is as good as before it: the log only grows, so an event committed
past the position before the read is still there when the probe looks.

A process that waits for another one to project carries another look
(``ViewStore.reached_probe``): whether the stored views stand at the log's head. That one goes
before the read in its pipeline: views at the head when it looked are there for a read that
starts after it, not for one that started before.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any


class LogMovedError(Exception):
    """The log holds an event past the probed position: the read must catch up first. Never
    leaves the runtime (it retries the read the usual way)."""


@dataclass(eq=False)
class LogProbe:
    """One look: ``statement`` with ``params`` returns a row when the views may lack a commit
    made before the query (the log holds an event past ``after``; for ``reached_probe``, the
    stored views stand short of the log's head or of ``after``). ``ViewStore.moved`` runs
    it on its own, for a read that did not carry it."""

    after: int
    statement: Any
    params: tuple[Any, ...]
    found: bool | None = None
    """What the probe found, once it has run (None: not yet)."""

    def settle(self, rows: Sequence[object]) -> None:
        """Note what the probe's statement returned; ``LogMovedError`` if it found a row."""
        self.found = bool(rows)
        if self.found:
            raise LogMovedError(self.after)


__all__ = ["LogMovedError", "LogProbe"]
