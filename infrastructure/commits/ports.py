"""What the commit path asks of a storage: fences checked in the insert's transaction, the
read-model step that commits with the events, and the event storage each backend is."""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager
from typing import Any, NamedTuple, Protocol
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    IntegrityError,
    Notification,
    StoredEvent,
)

from runledger.domain.ports import LogEntry
from runledger.infrastructure.commits.stats import CommitStats
from runledger.infrastructure.storage.log_probes import LogProbe


class VersionFence(NamedTuple):
    """What a command's commit rests on without writing it: no event of ``topics`` stored for
    ``aggregate_id`` after ``version`` (the version the command read).

    A storage checks it in the insert's own transaction, after taking the aggregate's lock
    shared (where it has per-aggregate locks), and refuses the insert with ``IntegrityError``
    when it no longer holds: the command then runs again, reading. So a fenced write that
    does not change its Run (session recording, effects) still conflicts with a concurrent
    ``run.claimed``, as the Run's own writes do on its unique versions (decision 27). With no
    topics it only holds the aggregate's lock (see ``IndexFence``).
    """

    aggregate_id: UUID
    version: int
    topics: tuple[str, ...]


class IndexFence(NamedTuple):
    """The aggregates indexed under ``lookup_key`` are still those the command ``seen``: no
    event of another one is stored under it. The insert holds ``guard_id``'s lock exclusively;
    every command that adds to the index holds it (a ``VersionFence``) until it commits, so
    the check sees that command's events, or that command's come after this one's in the log.
    """

    lookup_key: str
    seen: frozenset[UUID]
    guard_id: UUID


Fence = VersionFence | IndexFence
"""A read that a command's insert is refused without (``IntegrityError``) if it changed."""


class ArchivedAggregateError(IntegrityError):
    """The insert wrote an event for an aggregate whose run tree was pruned: the storage's
    archived-ids guard refused it (``storage.archived``). Ids are never reused, so the
    command that wrote it must drop what it cached of that aggregate and read again."""


class SameCommit(Protocol):
    """Work that commits in a command's insert transaction, after its events: the read models
    of the committing process (DESIGN "Write path").

    ``events.insert_events(stored, same_commit=step)`` has the step ``prepare`` for the events'
    positions (known after the insert, or expected: ``next_position``) and ``write`` on the
    transaction's cursor, then calls ``settle`` (always, once per attempt)
    with whether what ``write`` wrote committed with the events. The step never makes the
    events fail: when it cannot write (another writer moved the read models, a position gap)
    it writes nothing, and a database error in its writes rolls back to before them; the read
    models then catch up from the log as they would without the step.
    """

    def catch_up(self) -> None:
        """Bring the step's read models to the end of the log first. A storage calls it while
        the command holds its aggregates, that is while writers take turns on them: then the
        log's end is where the command's events land (unless writers of other aggregates
        come between), and the step can write them instead of leaving them to a catch-up
        that every waiting writer races for."""
        ...

    def next_position(self) -> int | None:
        """The position the step's read models expect next (a storage that learns positions
        only at the commit may assume its events take it and the ones after), or None when
        it cannot write now."""
        ...

    def prepare(self, stored_events: Sequence[StoredEvent], positions: Sequence[int]) -> bool:
        """Work out the writes for the events at ``positions``, before the storage's own
        statements go out (it may read committed rows); False if there are none to make."""
        ...

    def write(self, cursor: Any) -> bool:
        """Send the prepared writes on ``cursor``; False if it wrote nothing."""
        ...

    def settle(self, written: bool) -> None:
        """The transaction ended; ``written``: the step's writes committed with the events."""
        ...


class EventStorage(Protocol):
    """An event log with per-run and per-key indexes, plus a snapshot store.

    ``events`` stores ``domain.serialisation.LedgerStoredEvent`` rows (their ``run_id`` and
    ``lookup_key`` are indexed); its positions are the notification ids. Its
    ``insert_events`` takes an optional ``same_commit`` step (``SameCommit``) and ``fences``
    (``Fence``), checked in the insert's transaction.
    """

    @property
    def events(self) -> ApplicationRecorder: ...

    @property
    def snapshots(self) -> AggregateRecorder: ...

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Aggregates with an event indexed under ``lookup_key``, in log order."""
        ...

    def select_log(
        self, *, after: int, limit: int, run_id: str | None = None
    ) -> Sequence[Notification]:
        """Stored events after ``after`` in log order; with ``run_id``, that run's only."""
        ...

    def lock_aggregates(
        self, aggregate_ids: Sequence[UUID], *, conflicted: bool = True, first: bool = False
    ) -> AbstractContextManager[None]:
        """Hold these aggregates against other writers from the block's start until its save
        commits, so a contended command loads, checks and saves without being overtaken.
        Locks are taken in one fixed order; with no ids the block runs unlocked.

        ``conflicted``: this command has lost a conflict on them already (False: they are hot
        from other commands' conflicts only). A backend whose locks would serialise more than
        its commits do (SQLite: the reads and logic of every process) may hold only then.
        ``first``: it has lost several (``executor.FIRST_AFTER``); a backend whose other
        writers' inserts do not wait for holders (SQLite) makes them give way to it then."""
        ...

    @property
    def reads_ahead(self) -> bool:
        """Whether a rebuild reads its next page of the log while it projects one
        (``views.read_ahead``): where a read waits on a server, not on this process."""
        ...

    def read_log(self, *, after: int, limit: int, settled_through: int = 0) -> Sequence[LogEntry]:
        """The next ``limit`` stored events after ``after``, lean, for projections.

        ``settled_through``: a position the caller knows no open transaction may still fill
        at or below (a projection's tracking is there), so a missing position up to it is a
        hole for good, never a place to stop short."""
        ...

    def max_position(self) -> int:
        """The highest position in the log (0 when empty)."""
        ...

    def log_probe(self, after: int) -> LogProbe | None:
        """A look at the log past ``after`` that a query's first read can carry
        (``storage.log_probes``); None where catching up costs no more (memory)."""
        ...

    @property
    def stats(self) -> CommitStats:
        """The counters of this storage's commits."""
        ...

    def group_commits(self, grouping: bool) -> None:
        """Whether writer threads share transactions (False: each commits alone)."""
        ...

    def close(self) -> None: ...
