"""What every event storage does for retention: remove a pruned run tree in one transaction,
and keep its aggregate ids out of the log for good (the archived-ids guard).

``remove_tree`` is the one write of a prune (DESIGN.md "Retention"). In one transaction it

1. appends the tree's tombstone (first: on SQLite positions are rowids, and a rowid above
   every deleted row cannot be one of theirs, so no position is ever reused);
2. checks that the tree is exactly what its bundle holds: the aggregates with events of the
   tree's runs are the archived ones, at the archived versions (a command that wrote to the
   tree since it was judged makes it ``TreeChangedError``, and nothing is written);
3. records every aggregate id of the tree in the guard, naming the tombstone;
4. deletes the tree's events, checking that they are as many as the bundle holds, and the
   snapshots of its aggregates;
5. lets the caller write the read models on the same transaction (``ViewsWrite``): rows out
   of every slot, tracking moved onto the tombstone. False from it rolls everything back
   (``ViewsMovedError``).

The guard is enforced by the storage itself (SQLite and PostgreSQL: a trigger on the events
table; memory: the recorder), so no writer, in any process, with any cache, can give a pruned
aggregate a new event: the insert fails with ``ArchivedAggregateError`` (an
``IntegrityError``), and the command runs again, reading, and finds the tree archived. A
restore (``restore_tree``) does the other way round in one transaction: it lifts one
archive's guard rows (they name the tombstone's aggregate), re-inserts the tree's events with
their original versions at new positions, and appends the tombstone's ``run-tree.restored``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from uuid import UUID

from eventsourcing.persistence import StoredEvent

from runledger.domain.ports import LogEntry
from runledger.domain.serialisation import stored_payload
from runledger.infrastructure.commits.ports import Fence, VersionFence

ARCHIVED_TABLE: Final = "runledger_archived_ids"
"""The guard: one row per aggregate id of a pruned tree, with its tombstone's aggregate id."""

ARCHIVED_MESSAGE: Final = "runledger: aggregate archived"
"""How the SQLite trigger refuses an insert (``RAISE(ABORT, ...)``: an integrity error)."""

ARCHIVED_SQLSTATE: Final = "23RL1"
"""The SQLSTATE of PostgreSQL's guard (class 23: psycopg raises an ``IntegrityError``)."""

TOMBSTONE_TOPICS: Final = ("run-tree.archived", "run-tree.restored")
"""The wire names of a tombstone's events: carrying their root's run id, they are no events
of the tree."""

ViewsWrite = Callable[[Any, int, int], bool]
"""``(cursor, head, tombstone_position) -> written``: the read models' share of the removal,
on the transaction's cursor (None on memory); ``head`` is the log's last position before
the tombstone. False when the views moved or lag: the removal is rolled back."""


@dataclass(frozen=True)
class TreeRemoval:
    """One archived tree, as its removal checks and deletes it."""

    run_ids: Sequence[str]
    versions: Mapping[UUID, int]
    """Each aggregate of the tree and its last version, as the bundle holds them."""
    events: int
    """How many events the bundle holds: exactly as many are deleted."""
    tombstone: StoredEvent
    """The ``run-tree.archived`` event, appended in the same transaction."""
    root_run_id: str
    judged_at: int
    """The log's head when the tree was judged: a run created in the tree after it (a
    continuation or restart, whose events carry its own run id) keeps the tree."""

    @property
    def archive_id(self) -> UUID:
        """The tombstone's aggregate, which the guard rows name."""
        return _uuid(self.tombstone.originator_id)


@dataclass(frozen=True)
class TreeRestoral:
    """One archived tree, as its restore puts it back."""

    events: Sequence[StoredEvent]
    """The tree's events from its bundle, in their log order, with their original versions."""
    archive_id: UUID
    """The tombstone whose guard rows the restore lifts."""
    restored: StoredEvent
    """The tombstone's ``run-tree.restored``, appended in the same transaction."""

    @property
    def aggregate_ids(self) -> list[UUID]:
        """The tree's aggregates, each once, as the guard holds them."""
        ids = {_uuid(s.originator_id): None for s in self.events}
        return list(ids)


def _uuid(originator_id: UUID | str) -> UUID:
    return originator_id if isinstance(originator_id, UUID) else UUID(str(originator_id))


class GuardMovedError(Exception):
    """The guard does not hold every aggregate of the tree under this archive (the tree was
    restored already, or pruned again since): nothing was restored."""


class TreeChangedError(Exception):
    """A command wrote to the tree after its bundle was written: nothing was removed."""


class ViewsMovedError(Exception):
    """The read models moved (or lagged) under the removal: nothing was removed."""


CREATED_TOPIC: Final = "run.created"


def fenced_ids(fences: Sequence[Fence]) -> list[UUID]:
    """The aggregates an insert's commit rests on without writing them (its fences): one
    pruned since it was read makes the insert ``ArchivedAggregateError`` too, so nothing
    new (a continuation of a pruned parent, say) can hang off a pruned tree."""
    return [
        fence.aggregate_id if isinstance(fence, VersionFence) else fence.guard_id
        for fence in fences
    ]


def same_tree(found: Mapping[UUID, int], removal: TreeRemoval) -> bool:
    """Whether the tree's aggregates in the log (each with its last version) are the
    archived ones."""
    return dict(found) == dict(removal.versions)


def created_in_tree(created: LogEntry, root_run_id: str) -> bool:
    """Whether a ``run.created`` event makes a run of the tree rooted there."""
    return bool(stored_payload(created, created.position).get("root_run_id") == root_run_id)
