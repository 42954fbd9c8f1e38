"""The library's persistence parts and the executor, plugged into ``WorkflowRuns`` by the
composition root (``domain.ports.Wiring``)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any
from uuid import UUID

from eventsourcing.application import Application
from eventsourcing.persistence import AggregateRecorder, ApplicationRecorder, EventStore, Mapper

from runledger.infrastructure.commits.executor import CommandExecutor, SameCommitFactory
from runledger.infrastructure.commits.mapper import LedgerMapper
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.commits.stats import CommitStats


class StorageWiring:
    """Wires an application to one ``EventStorage``: its recorders, runledger's mapper, and a
    ``CommandExecutor`` with the read-model step and the after-commit hook."""

    def __init__(
        self,
        storage: EventStorage,
        *,
        same_commit: SameCommitFactory | None = None,
        on_commit: Callable[[], None] | None = None,
        stats: CommitStats | None = None,
    ) -> None:
        self.storage = storage
        self.same_commit = same_commit
        self.on_commit = on_commit
        self.stats = stats or CommitStats()

    def mapper(self) -> Mapper[UUID]:
        return LedgerMapper()

    def recorder(self) -> ApplicationRecorder:
        return self.storage.events

    def snapshot_store(self, mapper: Any) -> EventStore[UUID]:
        snapshots: AggregateRecorder = self.storage.snapshots
        return EventStore(mapper=mapper, recorder=snapshots)

    def commits(
        self,
        app: Application[UUID],
        load: Callable[[type[Any], UUID], Any],
        now: Callable[[], datetime],
    ) -> CommandExecutor:
        return CommandExecutor(
            app,
            self.storage,
            load=load,
            now=now,
            same_commit=self.same_commit,
            on_commit=self.on_commit,
            stats=self.stats,
            refused=getattr(app, "archived_refusal", None),
        )

    def archive_of(self, aggregate_id: UUID) -> UUID | None:
        """The tombstone aggregate of the pruned run tree this aggregate was in, if any
        (the storage's archived-ids guard)."""
        archived_by: Callable[[UUID], UUID | None] | None = getattr(
            self.storage, "archived_by", None
        )
        return None if archived_by is None else archived_by(aggregate_id)
