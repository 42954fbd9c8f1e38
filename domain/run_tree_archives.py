"""The RunTreeArchive aggregate: the tombstone a pruned run tree leaves in the log.

Pruning deletes a settled tree's events; its tombstone is what stays (DESIGN.md "Retention"):
the tree's runs, how many events left, each aggregate's last version and chain head, the
bundle that holds them and its SHA-256, and the digests of the read-model rows removed. A
restore checks a bundle against it before putting anything back. Each archive of a tree is
its own aggregate (a tree restored and pruned again has two), indexed under the tree's root.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id
from runledger.domain.values import Actor


def run_tree_archive_id(root_run_id: str, bundle_sha256: str) -> UUID:
    """One archive of the tree: the root and the bundle it went to."""
    return aggregate_id("run-tree-archive", f"{root_run_id}\0{bundle_sha256}")


def run_tree_lookup_key(root_run_id: str) -> str:
    """The key every archive of the tree is indexed under, so its tombstones can be found."""
    return f"run-tree-archive:{root_run_id}"


class RunTreeArchive(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """A pruned run tree's tombstone."""

    TOPIC = "run-tree-archive"
    DATETIME_FIELDS: ClassVar[tuple[str, ...]] = ("archived_at", "restored_at")

    root_run_id: str
    run_ids: list[str]
    events: int
    aggregates: dict[str, dict[str, Any]]
    bundle: str
    bundle_sha256: str
    removed_digests: dict[str, str]
    archived_at: datetime
    restored_at: datetime | None

    def __init__(self) -> None:
        """State is set by the Archived event."""

    @property
    def is_restored(self) -> bool:
        """Whether the tree's events were put back from this archive's bundle."""
        return self.restored_at is not None

    class Event(LedgerEvent):
        """Base of every RunTreeArchive event."""

    class Archived(Event, LedgerCreated):
        """The tree's events and read-model rows were deleted after its bundle verified.

        ``aggregates`` maps each aggregate id to ``{"version", "chain_head"}`` (its last
        version and the bundle's hash chain head); ``run_id`` is the tree's root.
        """

        TOPIC = "run-tree.archived"
        run_ids: list[str]
        events: int
        aggregates: dict[str, dict[str, Any]]
        bundle: str
        bundle_sha256: str
        removed_digests: dict[str, str]

        def lookup_key(self) -> str | None:
            return run_tree_lookup_key(self.run_id)

        def apply(self, archive: RunTreeArchive) -> None:
            archive.root_run_id = self.run_id
            archive.run_ids = list(self.run_ids)
            archive.events = self.events
            archive.aggregates = {key: dict(value) for key, value in self.aggregates.items()}
            archive.bundle = self.bundle
            archive.bundle_sha256 = self.bundle_sha256
            archive.removed_digests = dict(self.removed_digests)
            archive.archived_at = self.timestamp
            archive.restored_at = None

    class Restored(Event):
        """The tree's events were re-inserted from the archive's bundle (new log positions,
        their original versions) and its rows re-projected to the bundle's digests: the
        tombstone stays, so the log still says where the tree was in between.

        ``bundle`` is the file the events were read from (it may have moved since the prune);
        ``events`` how many were put back; ``run_id`` is the tree's root.
        """

        TOPIC = "run-tree.restored"
        events: int
        bundle: str

        def apply(self, archive: RunTreeArchive) -> None:
            archive.restored_at = self.timestamp

    class Snapshot(LedgerSnapshot):
        """The tombstone at a version."""

        TOPIC = "run-tree-archive.snapshot"

    @classmethod
    def archive(
        cls,
        root_run_id: str,
        *,
        run_ids: list[str],
        events: int,
        aggregates: dict[str, dict[str, Any]],
        bundle: str,
        bundle_sha256: str,
        removed_digests: dict[str, str],
        actor: Actor,
        now: datetime,
    ) -> RunTreeArchive:
        """The tombstone of the tree rooted at ``root_run_id``, archived to ``bundle``."""
        return cls._create(
            cls.Archived,
            id=run_tree_archive_id(root_run_id, bundle_sha256),
            timestamp=now,
            actor=actor.to_json(),
            run_id=root_run_id,
            run_ids=list(run_ids),
            events=events,
            aggregates=aggregates,
            bundle=bundle,
            bundle_sha256=bundle_sha256,
            removed_digests=removed_digests,
        )

    def restore(self, *, events: int, bundle: str, actor: Actor, now: datetime) -> None:
        """Record that the tree came back from ``bundle`` with ``events`` events."""
        self.trigger_event(
            self.Restored,
            timestamp=now,
            actor=actor.to_json(),
            run_id=self.root_run_id,
            events=events,
            bundle=bundle,
        )
