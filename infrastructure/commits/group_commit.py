"""Group commit: writer threads of one process that insert at once share one transaction.

A commit costs a disk flush (SQLite ``synchronous=FULL``, PostgreSQL ``synchronous_commit``)
or a round trip, whatever it carries. So the inserts that arrive while one is committing wait
for it, and the next writer in line (the leader) commits them all together: nobody waits a
moment longer than it would have waited for the write lock anyway, and a lone writer commits
alone at once (LevelDB's writer queue; no timer).

A group is written as one batch, with one read-model step, exactly as one command's events
would be. If the batch fails on what a request holds (a stale version in one of them, say),
every request of the group is written again alone, so each gets the outcome of its own events
and nothing else's: one writer's conflict never fails another's command. If the storage
itself fails (unreachable after its retries), every request gets that error at once rather
than each retrying in turn.

Writer processes are not grouped here: only PostgreSQL can, by one WAL flush serving every
commit waiting on it (how often depends on how fast the disk flushes; the bench's P2 counts
the WAL flushes per command), and a SQLite file has one writer at a time by design.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from eventsourcing.persistence import InterfaceError, OperationalError, StoredEvent

from runledger.domain.errors import StorageUnavailableError
from runledger.infrastructure.commits.ports import Fence, SameCommit
from runledger.infrastructure.commits.stats import CommitStats
from runledger.infrastructure.telemetry import TELEMETRY

MAX_GROUP_EVENTS: Final = 64
"""Events one group commits at most: on PostgreSQL the most that go as one VALUES insert, and
far below the aggregate locks one statement takes."""

UNREACHABLE: Final = (StorageUnavailableError, InterfaceError, OperationalError)
"""Errors of the storage itself (what the backends' retries give up on), not of a request.

The library's ``OperationalError`` (a dropped connection, a busy SQLite file) is distinct from
psycopg's, which a refused value raises too."""

Write = Callable[[Sequence[StoredEvent], SameCommit | None, Sequence[Fence]], list[int]]
"""A backend's insert of one batch in one transaction, with the step's read models, refused
(``IntegrityError``) when one of the fences no longer holds."""


@dataclass(eq=False)
class _Request:
    stored_events: Sequence[StoredEvent]
    step: SameCommit | None
    fences: Sequence[Fence] = ()
    done: bool = False
    positions: list[int] = field(default_factory=list)
    error: BaseException | None = None
    group: int = 1
    """How many requests the transaction that committed this one carried."""

    def answer(self) -> list[int]:
        if self.error is not None:
            raise self.error
        # On the requesting thread, inside its command's commit span.
        TELEMETRY.committed(self.stored_events, self.group)
        return self.positions


class GroupCommit:
    """The queue of one event log's writers; ``insert`` is the backend's insert, grouped."""

    def __init__(
        self,
        write: Write,
        *,
        max_events: int = MAX_GROUP_EVENTS,
        stats: CommitStats | None = None,
    ) -> None:
        self._write = write
        self._max_events = max_events
        self._queue: deque[_Request] = deque()
        self._changed = threading.Condition()
        self.grouping = True
        """False: every request commits alone (the bench's baseline for what grouping gives)."""
        self.stats = stats or CommitStats()
        """``batches`` and ``requests`` count here; ``requests / batches`` is the mean group."""

    @property
    def queued(self) -> int:
        """Requests in the queue now, the one being written included."""
        return len(self._queue)

    def insert(
        self,
        stored_events: Sequence[StoredEvent],
        step: SameCommit | None,
        fences: Sequence[Fence] = (),
    ) -> list[int]:
        """Insert these events (with the step's read models, under their fences) in a
        transaction that may carry other threads' events too; their positions, or the error
        their own insert raises."""
        request = _Request(stored_events, step, fences)
        with self._changed:
            self._queue.append(request)
            while not request.done and self._queue[0] is not request:
                self._changed.wait()
            if request.done:
                return request.answer()
            batch = self._take()
        try:
            self._commit(batch)
        finally:
            with self._changed:
                for member in batch:
                    if not member.done:
                        # The leader was interrupted (its own error is re-raised below).
                        member.error = member.error or RuntimeError("group commit interrupted")
                        member.done = True
                    self._queue.popleft()
                self.stats.requests += len(batch)
                self._changed.notify_all()
        return request.answer()

    def _take(self) -> list[_Request]:
        """The head of the queue and those behind it that fit in its group, in order.

        Stops at the first request that shares an aggregate with the group: two of them at
        the same version would fail the whole group, and at different ones the second could
        only follow the first.
        """
        if not self.grouping:
            return [self._queue[0]]
        batch: list[_Request] = []
        events = 0
        aggregates: set[object] = set()
        for request in self._queue:
            ids = {s.originator_id for s in request.stored_events}
            if batch and (
                events + len(request.stored_events) > self._max_events
                or not aggregates.isdisjoint(ids)
            ):
                break
            batch.append(request)
            events += len(request.stored_events)
            aggregates |= ids
        return batch

    def _commit(self, batch: list[_Request]) -> None:
        if len(batch) > 1 and self._commit_together(batch):
            return
        for request in batch:
            self._commit_alone(request)

    def _commit_together(self, batch: list[_Request]) -> bool:
        """One transaction for the group; False (nothing committed) when each request must be
        written alone instead, True once every request has its answer."""
        steps = [request.step for request in batch if request.step is not None]
        stored = [s for request in batch for s in request.stored_events]
        # A fence that fails the group (another member claimed the run, say) is judged again
        # below, alone, in log order.
        fences = [fence for request in batch for fence in request.fences]
        try:
            positions = self._write(stored, _GroupStep(steps) if steps else None, fences)
        except UNREACHABLE as error:
            # The storage failed (after its own retries): alone, each would fail the same way,
            # one after another.
            self.stats.batches += 1
            for request in batch:
                request.error = error
                request.done = True
            return True
        except Exception:
            # Anything else may come from what one request holds (a stale version, a value
            # the database refuses): each is written alone, and only its own fails.
            return False
        self.stats.batches += 1
        TELEMETRY.grouped(len(batch))
        start = 0
        for request in batch:
            end = start + len(request.stored_events)
            request.positions = positions[start:end]
            request.group = len(batch)
            request.done = True
            start = end
        return True

    def _commit_alone(self, request: _Request) -> None:
        try:
            request.positions = self._write(request.stored_events, request.step, request.fences)
        except Exception as error:
            request.error = error
        else:
            TELEMETRY.grouped(1)
        self.stats.batches += 1
        request.done = True


class _GroupStep:
    """The group's ``SameCommit``: the first request's step projects every event of the group
    (a step projects whatever events it is given, in log order), and every request's step
    learns the outcome, so each command knows its read models committed with its events."""

    def __init__(self, steps: Sequence[SameCommit]) -> None:
        self._lead = steps[0]
        self._steps = steps

    def catch_up(self) -> None:
        self._lead.catch_up()

    def next_position(self) -> int | None:
        return self._lead.next_position()

    def prepare(self, stored_events: Sequence[StoredEvent], positions: Sequence[int]) -> bool:
        return self._lead.prepare(stored_events, positions)

    def write(self, cursor: Any) -> bool:
        return self._lead.write(cursor)

    def settle(self, written: bool) -> None:
        # The lead first: it gives the projector back, which the others never took.
        for step in self._steps:
            step.settle(written)
