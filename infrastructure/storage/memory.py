"""In-process event storage: the embedded store for tests, demos and ``memory://``."""

from __future__ import annotations

import itertools
from bisect import bisect_right, insort
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from threading import Condition, Event, RLock, get_ident
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    IntegrityError,
    ListenNotifySubscription,
    Notification,
    StoredEvent,
    Subscription,
)

from runledger.domain.ports import LogEntry
from runledger.infrastructure.commits.group_commit import GroupCommit
from runledger.infrastructure.commits.ports import ArchivedAggregateError, Fence, SameCommit
from runledger.infrastructure.storage.archived import (
    CREATED_TOPIC,
    TOMBSTONE_TOPICS,
    GuardMovedError,
    TreeChangedError,
    TreeRemoval,
    TreeRestoral,
    ViewsMovedError,
    ViewsWrite,
    created_in_tree,
    fenced_ids,
    same_tree,
)
from runledger.infrastructure.storage.base import (
    FenceBrokenError,
    RecorderBackedStorage,
    as_uuid,
    fence_conditions,
    index_columns,
    index_fences,
)


class MemoryAggregateRecorder(AggregateRecorder):
    """Stored events per originator, kept in memory behind a lock."""

    def __init__(self) -> None:
        self._lock = RLock()
        self._versions: dict[UUID, list[int]] = {}
        self._events: dict[tuple[UUID, int], StoredEvent] = {}

    def insert_events(self, stored_events: Sequence[StoredEvent], **_: Any) -> Sequence[int] | None:
        with self._lock:
            keys = [(as_uuid(s.originator_id), s.originator_version) for s in stored_events]
            # Checked before anything is written, so a conflict leaves no partial insert.
            if len(set(keys)) < len(keys):
                msg = "Stored events are not unique within the batch"
                raise IntegrityError(msg)
            for key in keys:
                if key in self._events:
                    msg = f"Stored event already recorded: {key[0]} version {key[1]}"
                    raise IntegrityError(msg)
            return self._record(keys, stored_events)

    def _record(
        self, keys: list[tuple[UUID, int]], stored_events: Sequence[StoredEvent]
    ) -> Sequence[int] | None:
        for key, s in zip(keys, stored_events, strict=True):
            insort(self._versions.setdefault(key[0], []), key[1])
            self._events[key] = StoredEvent(
                originator_id=key[0],
                originator_version=key[1],
                topic=s.topic,
                state=s.state,
            )
        return None

    def forget(self, aggregate_ids: Sequence[UUID]) -> int:
        """Delete every stored event of these aggregates; returns how many there were."""
        with self._lock:
            removed = 0
            for aggregate_id in aggregate_ids:
                for version in self._versions.pop(aggregate_id, []):
                    del self._events[aggregate_id, version]
                    removed += 1
            return removed

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        key = as_uuid(originator_id)
        with self._lock:
            versions = self._versions.get(key, [])
            low = 0 if gt is None else bisect_right(versions, gt)
            high = len(versions) if lte is None else bisect_right(versions, lte)
            selected = versions[low:high]
            if desc:
                selected.reverse()
            if limit is not None:
                selected = selected[: max(limit, 0)]
            return [self._events[key, version] for version in selected]


class MemoryEventRecorder(MemoryAggregateRecorder, ApplicationRecorder):
    """The event log: positions count from 1, indexed by run id and lookup key. A pruned
    tree leaves holes (None): positions are never given again, as on the other backends."""

    def __init__(self) -> None:
        super().__init__()
        self._log: list[Notification | None] = []
        self._archived: dict[UUID, UUID] = {}
        """The archived-ids guard (``storage.archived``): aggregate id -> its tombstone."""
        self._positions_by_run: dict[str, list[int]] = {}
        self._run_of: dict[int, str] = {}
        # A dict keeps insertion order, which is first-position order, and makes ids distinct.
        self._originators_by_key: dict[str, dict[UUID, None]] = {}
        self._listeners: set[Event] = set()
        self.group = GroupCommit(self._write)
        self._holds = Condition()
        self._held: dict[UUID, int] = {}
        """Aggregates held (``lock_aggregates``) and the thread holding each."""

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        same_commit: SameCommit | None = None,
        fences: Sequence[Fence] = (),
        **kwargs: Any,
    ) -> Sequence[int] | None:
        if kwargs or not stored_events or self._holding():
            # A holder writes alone and never waits: queued behind a group whose leader
            # waits for the holder's aggregates, it would wait for itself.
            return self._write(stored_events, same_commit, fences, **kwargs)
        return self.group.insert(stored_events, same_commit, fences)

    def hold(self, aggregate_ids: Sequence[UUID]) -> None:
        """Take these aggregates for this thread, all at once, once no other thread holds one
        of them; writers that hold nothing wait at their insert until they are released."""
        me = get_ident()
        with self._holds:
            self._holds.wait_for(lambda: all(self._held.get(i, me) == me for i in aggregate_ids))
            for aggregate_id in aggregate_ids:
                self._held[aggregate_id] = me

    def release(self, aggregate_ids: Sequence[UUID]) -> None:
        """Give back what ``hold`` took."""
        with self._holds:
            for aggregate_id in aggregate_ids:
                self._held.pop(aggregate_id, None)
            self._holds.notify_all()

    def _holding(self) -> bool:
        me = get_ident()
        with self._holds:
            return any(thread == me for thread in self._held.values())

    def _wait_for_holders(self, stored_events: Sequence[StoredEvent]) -> None:
        # Only a writer holding nothing waits, and it holds nothing while it waits: no cycle.
        # (Not under the log's lock: a holder reads the log while it decides.)
        ids = {as_uuid(s.originator_id) for s in stored_events}
        with self._holds:
            self._holds.wait_for(lambda: ids.isdisjoint(self._held))

    def _write(
        self,
        stored_events: Sequence[StoredEvent],
        same_commit: SameCommit | None,
        fences: Sequence[Fence] = (),
        **kwargs: Any,
    ) -> list[int]:
        """The batch and the step's read models under the log's lock (``GroupCommit``: no
        flush to share here, but writers queue exactly as on the other backends)."""
        written = False
        if not self._holding():
            self._wait_for_holders(stored_events)
        try:
            with self._lock:
                self._check_archived(stored_events, fences)
                self._check_fences(fences, stored_events)
                positions = list(super().insert_events(stored_events, **kwargs) or [])
                if same_commit is not None and positions:
                    # Under the log's lock, so no other insert comes between the events and
                    # the views that follow them: memory's "same transaction".
                    written = same_commit.prepare(stored_events, positions) and (
                        same_commit.write(None)
                    )
        except BaseException:
            if same_commit is not None:
                same_commit.settle(False)
            raise
        if same_commit is not None:
            same_commit.settle(written)
        for listener in list(self._listeners):
            listener.set()
        return positions

    def _check_archived(
        self, stored_events: Sequence[StoredEvent], fences: Sequence[Fence]
    ) -> None:
        if any(aggregate_id in self._archived for aggregate_id in fenced_ids(fences)):
            msg = "a fenced aggregate was archived"
            raise ArchivedAggregateError(msg)
        for s in stored_events:
            originator_id = as_uuid(s.originator_id)
            if originator_id in self._archived:
                msg = f"aggregate {originator_id} was archived"
                raise ArchivedAggregateError(msg)

    def remove_tree(self, removal: TreeRemoval, write_views: ViewsWrite) -> int:
        """``storage.archived``'s removal under the log's lock (memory's transaction): the
        views are written first, at the position the tombstone then takes, so a refusal of
        theirs leaves the log untouched."""
        with self._lock:
            runs = set(removal.run_ids)
            found: dict[UUID, int] = {}
            for notification in self._log:
                if notification is None or notification.topic in TOMBSTONE_TOPICS:
                    continue
                run_id = self._run_of.get(notification.id)
                if run_id in runs:
                    found[as_uuid(notification.originator_id)] = notification.originator_version
            if not same_tree(found, removal):
                raise TreeChangedError()
            for notification in self._log[removal.judged_at :]:
                if (
                    notification is not None
                    and notification.topic == CREATED_TOPIC
                    and self._run_of.get(notification.id) not in runs
                    and created_in_tree(_entry(notification), removal.root_run_id)
                ):
                    raise TreeChangedError()
            ids = set(removal.versions)
            doomed = [n.id for n in self._log if n is not None and n.originator_id in ids]
            if len(doomed) != removal.events:
                raise TreeChangedError()
            head = len(self._log)
            while head and self._log[head - 1] is None:
                head -= 1
            tombstone = len(self._log) + 1
            if not write_views(None, head, tombstone):
                raise ViewsMovedError()
            [written] = self._write([removal.tombstone], None)
            for position in doomed:
                self._log[position - 1] = None
                run_id = self._run_of.pop(position, None)
                if run_id is not None:
                    self._positions_by_run[run_id].remove(position)
            for originators in self._originators_by_key.values():
                for aggregate_id in ids:
                    originators.pop(aggregate_id, None)
            self.forget(list(ids))
            for aggregate_id in ids:
                self._archived[aggregate_id] = removal.archive_id
            return written

    def restore_tree(self, restoral: TreeRestoral) -> list[int]:
        """``storage.archived``'s restore under the log's lock: the guard is lifted only if it
        names this archive for every aggregate, and put back if the insert fails."""
        with self._lock:
            ids = restoral.aggregate_ids
            if any(self._archived.get(aggregate_id) != restoral.archive_id for aggregate_id in ids):
                raise GuardMovedError()
            for aggregate_id in ids:
                del self._archived[aggregate_id]
            try:
                return self._write([*restoral.events, restoral.restored], None)
            except BaseException:
                for aggregate_id in ids:
                    self._archived[aggregate_id] = restoral.archive_id
                raise

    def archived_by(self, aggregate_id: UUID) -> UUID | None:
        """The tombstone aggregate of the pruned tree ``aggregate_id`` was in, if it was."""
        with self._lock:
            return self._archived.get(aggregate_id)

    def _check_fences(self, fences: Sequence[Fence], stored_events: Sequence[StoredEvent]) -> None:
        """Refuse the insert if a fence is broken by a stored event or one of the batch's
        own (a group may carry the claim it must not follow)."""
        for condition in fence_conditions(fences):
            aggregate_id, version, topic = condition
            versions = self._versions.get(aggregate_id, [])
            later = versions[bisect_right(versions, version) :]
            stored = any(self._events[aggregate_id, v].topic == topic for v in later)
            batched = any(
                as_uuid(s.originator_id) == aggregate_id
                and s.originator_version > version
                and s.topic == topic
                for s in stored_events
            )
            if stored or batched:
                raise FenceBrokenError.of(condition)
        for fence in index_fences(fences):
            indexed = [
                *self._originators_by_key.get(fence.lookup_key, {}),
                *(
                    as_uuid(s.originator_id)
                    for s in stored_events
                    if index_columns(s)[1] == fence.lookup_key
                ),
            ]
            if not fence.seen.issuperset(indexed):
                raise FenceBrokenError.of_index(fence)

    def _record(
        self, keys: list[tuple[UUID, int]], stored_events: Sequence[StoredEvent]
    ) -> Sequence[int] | None:
        super()._record(keys, stored_events)
        positions: list[int] = []
        for key, s in zip(keys, stored_events, strict=True):
            position = len(self._log) + 1
            self._log.append(
                Notification(
                    id=position,
                    originator_id=key[0],
                    originator_version=key[1],
                    topic=s.topic,
                    state=s.state,
                )
            )
            run_id, lookup_key = index_columns(s)
            if run_id is not None:
                self._positions_by_run.setdefault(run_id, []).append(position)
                self._run_of[position] = run_id
            if lookup_key is not None:
                self._originators_by_key.setdefault(lookup_key, {})[key[0]] = None
            positions.append(position)
        return positions

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        first = 1 if start is None else (start if inclusive_of_start else start + 1)
        with self._lock:
            last = len(self._log) if stop is None else min(stop, len(self._log))
            selected: list[Notification] = []
            if limit <= 0:
                return selected
            for index in range(max(first, 1) - 1, last):
                notification = self._log[index]
                if notification is None or (topics and notification.topic not in topics):
                    continue
                selected.append(notification)
                if len(selected) == limit:
                    break
            return selected

    def max_notification_id(self) -> int | None:
        with self._lock:
            return len(self._log) or None

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return MemorySubscription(self, gt=gt, topics=topics)

    def listen(self, event: Event) -> None:
        """Have ``event`` set after each insert."""
        self._listeners.add(event)

    def unlisten(self, event: Event) -> None:
        """Stop setting ``event`` after inserts."""
        self._listeners.discard(event)

    def select_log(self, *, after: int, limit: int, run_id: str | None) -> list[Notification]:
        """Notifications after ``after`` in log order; with ``run_id``, that run's only."""
        if limit <= 0:
            return []
        with self._lock:
            if run_id is None:
                selected: list[Notification] = []
                for notification in itertools.islice(self._log, max(after, 0), None):
                    if notification is not None:
                        selected.append(notification)
                        if len(selected) == limit:
                            break
                return selected
            positions = self._positions_by_run.get(run_id, [])
            start = bisect_right(positions, after)
            return [
                notification
                for p in positions[start : start + limit]
                if (notification := self._log[p - 1]) is not None
            ]

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Originators with an event under ``lookup_key``, by first position."""
        with self._lock:
            return list(self._originators_by_key.get(lookup_key, {}))


class MemorySubscription(ListenNotifySubscription[MemoryEventRecorder]):
    """Follows a memory log, woken by each insert."""

    def __init__(
        self, recorder: MemoryEventRecorder, gt: int | None = None, topics: Sequence[str] = ()
    ) -> None:
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self._recorder.listen(self._has_been_notified)
        # An insert between the first pull (already started) and listen() set no flag.
        self._has_been_notified.set()

    def stop(self) -> None:
        super().stop()
        self._recorder.unlisten(self._has_been_notified)


class MemoryStorage(RecorderBackedStorage[MemoryEventRecorder, MemoryAggregateRecorder]):
    """Event log and snapshots in this process only (lost on exit)."""

    def __init__(self) -> None:
        super().__init__(MemoryEventRecorder(), MemoryAggregateRecorder())

    @contextmanager
    def lock_aggregates(
        self, aggregate_ids: Sequence[UUID], *, conflicted: bool = True, first: bool = False
    ) -> Iterator[None]:
        """Hold the aggregates for the block (other writers of them wait at their insert),
        conflicted or only hot (holding costs nothing here but the wait).

        Not the log's lock: a holder reads through the library's repository, whose
        per-aggregate fast-forward lock another reader may hold while it waits for the log.
        """
        del conflicted, first
        if not aggregate_ids:
            yield
            return
        self._events.hold(aggregate_ids)
        try:
            yield
        finally:
            self._events.release(aggregate_ids)

    def remove_tree(self, removal: TreeRemoval, write_views: ViewsWrite) -> int:
        """Remove a pruned tree (``storage.archived``); returns the tombstone's position."""
        position = self._events.remove_tree(removal, write_views)
        self._snapshots.forget(list(removal.versions))
        return position

    def restore_tree(self, restoral: TreeRestoral) -> list[int]:
        """Put a pruned tree back (``storage.archived``); returns the new positions."""
        return self._events.restore_tree(restoral)

    def archived_by(self, aggregate_id: UUID) -> UUID | None:
        """The tombstone aggregate of the pruned tree ``aggregate_id`` was in, if it was."""
        return self._events.archived_by(aggregate_id)

    def read_log(self, *, after: int, limit: int, settled_through: int = 0) -> list[LogEntry]:
        """The next stored events after ``after``, as lean tuples (every commit is visible
        when it returns: nothing to settle)."""
        del settled_through
        return [_entry(n) for n in self._events.select_log(after=after, limit=limit, run_id=None)]

    def close(self) -> None:
        """Nothing to release; kept for the ``EventStorage`` contract."""


def _entry(notification: Notification) -> LogEntry:
    return LogEntry(
        notification.id,
        notification.topic,
        notification.originator_id,
        notification.originator_version,
        notification.state,
    )
