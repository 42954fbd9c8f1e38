"""How a command commits: its attempts, the lock and cache-trust policy between them, and the
one atomic save of what it changed (events, with the read models where a step is given, then
the cache and due snapshots)."""

from __future__ import annotations

import copy
import random
import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager, suppress
from datetime import datetime
from typing import Any, Final, TypeVar
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.domain import BaseAggregate
from eventsourcing.persistence import IntegrityError

from runledger.domain.errors import ConcurrencyError, WorkflowError
from runledger.domain.ports import Command
from runledger.infrastructure.commits.ports import (
    ArchivedAggregateError,
    EventStorage,
    Fence,
    SameCommit,
)
from runledger.infrastructure.commits.stats import CommitStats
from runledger.infrastructure.commits.unit_of_work import HotAggregateError, UnitOfWork

A = TypeVar("A", bound=BaseAggregate[UUID])
T = TypeVar("T")

HOT_SECONDS: Final = 2.0
"""How long after a conflict a command reads an aggregate rather than trust its cached copy."""
MAX_HOT_AGGREGATES: Final = 1000
FIRST_AFTER: Final = 10
"""Conflicts a command loses before it holds its aggregates going first
(``EventStorage.lock_aggregates``): holders, not first attempts, then win a hot run."""
MAX_HOT_STOPS: Final = 3
"""Attempts a command stops at a read of a hot aggregate it does not hold (``HotAggregateError``,
one aggregate more held each time); past them it runs to its end, then holds all it changed."""
MAX_ATTEMPTS: Final = 50
"""Attempts of one command before ``ConcurrencyError``: far more than held locks ever need."""

SameCommitFactory = Callable[[], AbstractContextManager[SameCommit | None]]
"""Gives, per save, the step that writes the read models in the events' transaction."""

Refused = Callable[[Sequence[BaseAggregate[UUID]]], Exception | None]
"""The error for a save the archived-ids guard refused (a run archived), given what it
changed; None when none of them was archived after all."""


def forget_cached(app: Application[UUID], aggregate_ids: Iterable[UUID]) -> None:
    """Drop these aggregates from the application's cache (a pruned tree's: a cached copy
    would be fast-forwarded by no event and answer as if it still existed)."""
    cache = app.repository.cache
    if cache is None:
        return
    for aggregate_id in aggregate_ids:
        with suppress(KeyError):
            cache.get(aggregate_id, evict=True)


def _unheld_existing(changed: Sequence[BaseAggregate[UUID]], held: Sequence[UUID]) -> list[UUID]:
    """The aggregates a save would change that it does not hold and that existed before it
    (one it creates is no other writer's to hold)."""
    holding = set(held)
    return [
        aggregate.id
        for aggregate in changed
        if aggregate.id not in holding and aggregate.version > len(aggregate.pending_events)
    ]


class CommandExecutor:
    """Runs commands of one application against one storage (``domain.ports.Commits``)."""

    def __init__(
        self,
        app: Application[UUID],
        storage: EventStorage,
        *,
        load: Callable[[type[Any], UUID], Any],
        now: Callable[[], datetime],
        same_commit: SameCommitFactory | None = None,
        on_commit: Callable[[], None] | None = None,
        stats: CommitStats | None = None,
        refused: Refused | None = None,
    ) -> None:
        """``on_commit`` runs after each command that saved something (the embedded read
        models catch up there), in place of the library's private notification hook.
        ``refused`` names the error of a save that wrote to a pruned tree."""
        self._app = app
        self._storage = storage
        self._load = load
        self._now = now
        self._same_commit = same_commit
        self._on_commit = on_commit
        self.stats = stats or CommitStats()
        self._conflicted_at: dict[UUID, float] = {}
        self._refused = refused

    # -- what a unit of work reads ----------------------------------------------------------

    def has_seen(self, aggregate_id: UUID) -> bool:
        """Whether the aggregate is in this process's cache (so it exists in the store)."""
        cache = self._app.repository.cache
        return cache is not None and aggregate_id in cache.cache

    def cached(self, aggregate_id: UUID) -> BaseAggregate[UUID] | None:
        """A copy of the aggregate as this process last saved or loaded it, without reading
        the store; None when it is not cached, or conflicted lately (other writers change
        it, so the cached version would only cost an insert that fails)."""
        cache = self._app.repository.cache
        if cache is None:
            return None
        conflicted = self._conflicted_at.get(aggregate_id)
        if conflicted is not None and time.monotonic() - conflicted < HOT_SECONDS:
            return None
        try:
            aggregate = cache.get(aggregate_id)
        except KeyError:
            return None
        if not isinstance(aggregate, BaseAggregate):
            return None
        # Commands change what they load; the cached one must stay as it was stored.
        return copy.deepcopy(aggregate)

    def load(self, cls: type[A], aggregate_id: UUID) -> A | None:
        """The aggregate as stored, or None when there is none of that class."""
        found: A | None = self._load(cls, aggregate_id)
        return found

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Aggregates with an event indexed under ``lookup_key``, in log order."""
        return self._storage.originator_ids_by_key(lookup_key)

    # -- attempts ---------------------------------------------------------------------------

    def execute(
        self,
        command: Command[T],
        *,
        attempts: int | None = None,
        exhausted: Callable[[], Exception] | None = None,
    ) -> T:
        """Run ``command`` and save what it changed, retrying on a version conflict.

        The first attempt is optimistic (no lock, one round trip). After a conflict, the
        command runs again holding every aggregate it changed so far, so the writers of a hot
        run take turns instead of retrying without bound; the version check stays the guard.
        An attempt that reads an aggregate which conflicted lately (``hot``) without holding
        it stops there and runs again holding it.
        At most ``attempts`` times (default ``MAX_ATTEMPTS``), then ``exhausted()`` is raised.
        """
        contended: list[UUID] = []
        trusting = assume_new = True
        conflicted = False
        losses = stops = 0
        for attempt in range(MAX_ATTEMPTS if attempts is None else attempts):
            changed: list[BaseAggregate[UUID]] = []
            try:
                first = losses >= FIRST_AFTER
                with self._storage.lock_aggregates(contended, conflicted=conflicted, first=first):
                    unit = UnitOfWork(
                        self,
                        self._now(),
                        trusting=trusting,
                        assume_new=assume_new,
                        held=contended if stops < MAX_HOT_STOPS else None,
                    )
                    try:
                        result = command(unit)
                    except HotAggregateError as hot_read:
                        # Again holding it too, from the start, in the fixed order.
                        contended = sorted({*contended, hot_read.aggregate_id})
                        trusting = False
                        stops += 1
                        continue
                    except WorkflowError:
                        if not unit.assumed:
                            raise
                        # The error may come from what the cache said: ask the store.
                        trusting = assume_new = False
                        continue
                    changed = unit.changed()
                    if not changed and unit.assumed:
                        # An answer that writes nothing is not checked by a save's keys.
                        trusting = assume_new = False
                        continue
                    unheld = _unheld_existing(changed, contended) if contended else []
                    if unheld:
                        # Its insert would lock them after those it holds, out of the one
                        # order: two commands holding halves of the same runs deadlocked.
                        contended = sorted({*contended, *unheld})
                        trusting = False
                        changed = []
                        continue
                    hot = [] if contended else self._hot([a.id for a in changed])
                    if hot:
                        # Other writers keep changing these: an optimistic save would most
                        # likely conflict, so run again holding them from the start instead.
                        contended = hot
                        trusting = False
                        changed = []
                        continue
                    if changed:
                        self._save(changed, unit.fences(changed))
            except ArchivedAggregateError:
                # A pruned tree: what this process cached of it is gone from the store, and
                # its ids are never given again, so writing one of them cannot succeed.
                self._forget(changed)
                error = None if self._refused is None else self._refused(changed)
                if error is not None:
                    raise error from None
                # Only something it read (a fence) was pruned: run again, reading, as after
                # a conflict; the read now finds it gone.
                self.stats.conflicts += 1
                conflicted = True
                trusting = assume_new = False
                continue
            except IntegrityError:
                self.stats.conflicts += 1
                losses += 1
                conflicted = True
                trusting = assume_new = False
                contended = sorted({*contended, *(aggregate.id for aggregate in changed)})
                self._note_conflict(contended)
                # Jittered, so two losers that do not hold their aggregates yet do not
                # collide again straight away.
                time.sleep(random.uniform(0, 0.001 * (attempt + 1)))  # noqa: S311
                continue
            if changed and self._on_commit is not None:
                self._on_commit()
            return result
        raise ConcurrencyError() if exhausted is None else exhausted()

    def _forget(self, aggregates: Iterable[BaseAggregate[UUID]]) -> None:
        forget_cached(self._app, (aggregate.id for aggregate in aggregates))

    def hot(self, aggregate_id: UUID) -> bool:
        """Whether the aggregate conflicted lately (``HOT_SECONDS``): asked at every first
        read of an aggregate, so one lookup, no list."""
        return self._conflicted_lately(aggregate_id, time.monotonic())

    def _hot(self, aggregate_ids: Iterable[UUID]) -> list[UUID]:
        """The aggregates among these that conflicted lately, in the fixed (sorted) order."""
        now = time.monotonic()
        return sorted(i for i in aggregate_ids if self._conflicted_lately(i, now))

    def _conflicted_lately(self, aggregate_id: UUID, now: float) -> bool:
        at = self._conflicted_at.get(aggregate_id)
        return at is not None and now - at < HOT_SECONDS

    def _note_conflict(self, aggregate_ids: Iterable[UUID]) -> None:
        now = time.monotonic()
        if len(self._conflicted_at) > MAX_HOT_AGGREGATES:
            # A copy (taken at once under the GIL): other threads may note conflicts meanwhile.
            noted = dict(self._conflicted_at)
            self._conflicted_at = {key: at for key, at in noted.items() if now - at < HOT_SECONDS}
        for aggregate_id in aggregate_ids:
            self._conflicted_at[aggregate_id] = now

    # -- the save ---------------------------------------------------------------------------

    def _save(self, aggregates: Sequence[BaseAggregate[UUID]], fences: Sequence[Fence]) -> None:
        """Insert the aggregates' new events in one transaction (with the read models where
        ``same_commit`` gives a step, refused while a fence is broken), then cache the
        aggregates and take due snapshots.

        In place of the library's ``save``: the events are mapped once, and nothing is read
        back; the cache is updated only after the commit, so it never holds what the store
        refused.
        """
        # The library's ``ProcessingEvent.collect_events`` checks each object against its
        # runtime protocols, which cost more than the rest of the collection.
        events = [event for aggregate in aggregates for event in aggregate.collect_events()]
        mapper = self._app.mapper
        stored = [mapper.to_stored_event(event) for event in events]
        recorder = self._storage.events
        if self._same_commit is None:
            recorder.insert_events(stored, fences=fences)
        else:
            with self._same_commit() as step:
                recorder.insert_events(stored, same_commit=step, fences=fences)
        cache = self._app.repository.cache
        if cache is not None:
            for aggregate in aggregates:
                cache.put(aggregate.id, aggregate)
        self._take_due_snapshots(aggregates, events)

    def _take_due_snapshots(
        self, aggregates: Sequence[BaseAggregate[UUID]], events: Sequence[Any]
    ) -> None:
        """Snapshot an aggregate whose event reached its interval, from the aggregate in
        hand when it is at that version (the library would replay it from the store)."""
        app = self._app
        if app.snapshots is None:
            return
        saved = {aggregate.id: aggregate for aggregate in aggregates}
        for event in events:
            aggregate = saved[event.originator_id]
            interval = app.snapshotting_intervals.get(type(aggregate))
            if interval is None or event.originator_version % interval:
                continue
            snapshot_class = getattr(type(aggregate), "Snapshot", None)
            if snapshot_class is not None and aggregate.version == event.originator_version:
                app.snapshots.put([snapshot_class.take(aggregate)])
            else:
                app.take_snapshot(event.originator_id, version=event.originator_version)
