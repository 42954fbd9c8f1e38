"""The unit of work: the aggregates one attempt of a command has read or created, and the
fences its commit rests on."""

from __future__ import annotations

from collections.abc import Collection, Iterator, Sequence
from datetime import datetime
from typing import Protocol, TypeVar
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.effects import Effect, effects_of_run_key
from runledger.domain.events import LedgerEvent
from runledger.domain.follow_ups import FollowUp, follow_ups_of_run_key
from runledger.domain.ports import CommandUnit
from runledger.domain.records import RunClaim
from runledger.domain.runs import Run, restarts_in_tree_key, run_aggregate_id
from runledger.domain.settings_scopes import SettingsScope, settings_of_run_key
from runledger.domain.workflow_messages import WorkflowMessage, source_lookup_keys
from runledger.infrastructure.commits.ports import Fence, IndexFence, VersionFence

A = TypeVar("A", bound=BaseAggregate[UUID])


class AggregateSource(Protocol):
    """Where a unit of work reads aggregates: the store, through this process's cache."""

    def has_seen(self, aggregate_id: UUID) -> bool:
        """Whether the aggregate is in this process's cache (so it exists in the store)."""
        ...

    def cached(self, aggregate_id: UUID) -> BaseAggregate[UUID] | None:
        """A copy of the aggregate as this process last saved or loaded it, or None."""
        ...

    def hot(self, aggregate_id: UUID) -> bool:
        """Whether other writers changed the aggregate lately (it conflicted here)."""
        ...

    def load(self, cls: type[A], aggregate_id: UUID) -> A | None:
        """The aggregate as stored, or None when there is none of that class."""
        ...

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Aggregates with an event indexed under ``lookup_key``, in log order."""
        ...


class HotAggregateError(Exception):
    """An attempt read an aggregate other writers keep changing without holding its lock:
    the executor runs the command again holding it (``UnitOfWork.held``)."""

    def __init__(self, aggregate_id: UUID) -> None:
        super().__init__(f"aggregate {aggregate_id} is contended")
        self.aggregate_id = aggregate_id


class UnitOfWork(CommandUnit):
    """The aggregates one attempt of a command has loaded or created, loaded at most once.

    A ``trusting`` unit (a command's first attempt) takes an aggregate this process has seen
    from the cache without reading the store; one that may ``assume_new`` takes an aggregate
    it has never seen as new where the command would create it (``get_or_assume_new``).
    Either guess, if wrong, makes the save conflict on the store's unique keys; ``assumed``
    tells the application that an answer or an error of this attempt may rest on one, so it
    runs the command again, reading.
    """

    def __init__(
        self,
        source: AggregateSource,
        now: datetime,
        *,
        trusting: bool = False,
        assume_new: bool = False,
        held: Collection[UUID] | None = None,
    ) -> None:
        self.source = source
        self.held = held
        """The aggregates whose locks this attempt holds; reading a hot one not among them
        stops it (``HotAggregateError``). None: no attempt locks, nothing stops it."""
        self.now = now
        self.trusting = trusting
        self.assume_new = assume_new
        self.assumed = False
        self._aggregates: dict[UUID, BaseAggregate[UUID] | None] = {}
        self._version_fences: dict[UUID, VersionFence] = {}
        self._index_fences: dict[str, IndexFence] = {}

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        if aggregate_id not in self._aggregates:
            # Stopped here, not run to its end: its save would find the aggregate hot and be
            # thrown away, its read of the store and its processor time spent in vain (1.70
            # -> 1.39 ms a command, four processes on one run on PostgreSQL).
            held = self.held
            if held is not None and aggregate_id not in held and self.source.hot(aggregate_id):
                raise HotAggregateError(aggregate_id)
            cached = self.source.cached(aggregate_id) if self.trusting else None
            if cached is not None:
                self.assumed = True
                self._aggregates[aggregate_id] = cached
            else:
                self._aggregates[aggregate_id] = self.source.load(cls, aggregate_id)
        aggregate = self._aggregates[aggregate_id]
        return aggregate if isinstance(aggregate, cls) else None

    def get_or_assume_new(self, cls: type[A], aggregate_id: UUID) -> A | None:
        if (
            self.assume_new
            and aggregate_id not in self._aggregates
            and not self.source.has_seen(aggregate_id)
        ):
            self.assumed = True
            self._aggregates[aggregate_id] = None
            return None
        return self.get(cls, aggregate_id)

    def add(self, aggregate: A) -> A:
        # Re-insert so a new aggregate's events follow those of aggregates touched earlier
        # (the log then reads: run accepts, follow-up queued, message created).
        self._aggregates.pop(aggregate.id, None)
        self._aggregates[aggregate.id] = aggregate
        return aggregate

    def changed(self) -> list[BaseAggregate[UUID]]:
        return [a for a in self._aggregates.values() if a is not None and a.pending_events]

    def fenced_run(self, run_id: object, authority: RunClaim | None) -> Run:
        """The run, once its write authority holds (``Run.fence``), also at the commit: the
        save carries a fence, so a claim committed after the version read here refuses it and
        the command runs again, reading (decision 27). A write that changes the run needs no
        fence: its versions conflict with the claim's."""
        run = self.run(run_id)
        self._hold(run, Run.Claimed.TOPIC)
        run.fence(authority, now=self.now)
        return run

    def guard_settings_of(self, run: Run) -> None:
        # Held shared to the commit: a continuation child's creation holds the run
        # exclusively while it checks that it saw every scope (``settings_scopes_active_on``).
        self._hold(run)

    def _hold(self, aggregate: BaseAggregate[UUID], *topics: str) -> None:
        """Fence the aggregate at the version first read (``VersionFence``)."""
        held = self._version_fences.get(aggregate.id)
        version = aggregate.version if held is None else held.version
        known = () if held is None else held.topics
        merged = tuple(dict.fromkeys((*known, *topics)))
        self._version_fences[aggregate.id] = VersionFence(aggregate.id, version, merged)

    def fences(self, changed: Sequence[BaseAggregate[UUID]]) -> list[Fence]:
        """The fences for the save to check: of the aggregates read but not changed (a
        change conflicts on its versions anyway) and of the indexes read to completion, where
        what this save itself adds to an index is no one else's."""
        written = {aggregate.id for aggregate in changed}
        held: list[Fence] = [f for key, f in self._version_fences.items() if key not in written]
        if not self._index_fences:
            return held
        added: dict[str, set[UUID]] = {}
        for aggregate in changed:
            for event in aggregate.pending_events:
                key = event.lookup_key() if isinstance(event, LedgerEvent) else None
                if key is not None:
                    added.setdefault(key, set()).add(aggregate.id)
        indexes = [
            fence._replace(seen=fence.seen | added.get(key, set()))
            for key, fence in self._index_fences.items()
        ]
        return [*held, *indexes]

    def follow_ups_of(self, run_id: str) -> Iterator[FollowUp]:
        return self._indexed(FollowUp, follow_ups_of_run_key(run_id))

    def messages_of_source(self, source_id: str) -> Iterator[WorkflowMessage]:
        # Looked up again on every attempt, so a retry also sees messages created since. A
        # digest key may also be some other source's id: only this source's messages count.
        for key in source_lookup_keys(source_id):
            for message in self._indexed(WorkflowMessage, key):
                if message.source_id == source_id:
                    yield message

    def effects_of(self, run_id: str) -> Iterator[Effect]:
        return self._indexed(Effect, effects_of_run_key(run_id))

    def restarts_in_tree(self, root_run_id: str) -> Iterator[Run]:
        # Fenced: two restarts of one tree from different sources share no aggregate, so
        # only the index can tell the later one of the earlier (rule 9). Every restart holds
        # the root's lock for its check, so they take turns, and the later runs again.
        seen = self._fenced_index(restarts_in_tree_key(root_run_id), root_run_id)
        runs = (self.get(Run, aggregate_id) for aggregate_id in seen)
        return (run for run in runs if run is not None)

    def settings_scopes_active_on(self, run_id: str) -> Iterator[SettingsScope]:
        # The index lists every scope that ever became active on the run; some moved on.
        # Read to completion: the save is refused if a scope joined it meanwhile (a scope
        # created on the run holds it, ``guard_settings_of``), and the command runs again.
        seen = self._fenced_index(settings_of_run_key(run_id), run_id)
        scopes = (self.get(SettingsScope, aggregate_id) for aggregate_id in seen)
        return (s for s in scopes if s is not None and s.active_run_id == run_id)

    def _fenced_index(self, key: str, guard_run_id: str) -> list[UUID]:
        """The aggregates indexed under ``key``, read whole; the save is refused if another
        one joins the index before it commits (``IndexFence``, under the run's lock)."""
        seen = self.source.originator_ids_by_key(key)
        self._index_fences[key] = IndexFence(key, frozenset(seen), run_aggregate_id(guard_run_id))
        return seen

    def _indexed(self, cls: type[A], lookup_key: str) -> Iterator[A]:
        for aggregate_id in self.source.originator_ids_by_key(lookup_key):
            found = self.get(cls, aggregate_id)
            if found is not None:
                yield found
