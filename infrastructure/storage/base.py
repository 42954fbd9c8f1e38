"""What the three event storages share: table names, how a stored event's columns are derived,
the UUID-only originator ids, the log queries both SQL backends answer, and the storage object
every backend builds from its two recorders."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Generic, Literal, Protocol, TypeVar
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    DataError,
    IntegrityError,
    Notification,
    StoredEvent,
)

from runledger.infrastructure.commits.group_commit import GroupCommit
from runledger.infrastructure.commits.mapper import LedgerStoredEvent
from runledger.infrastructure.commits.ports import Fence, IndexFence, VersionFence
from runledger.infrastructure.commits.stats import CommitStats
from runledger.infrastructure.storage.log_probes import LogProbe

EVENTS_TABLE = "runledger_events"
LOG_COLUMNS = "position, topic, originator_id, originator_version, state"
"""The columns of a ``LogEntry``, in its order."""
SNAPSHOTS_TABLE = "runledger_snapshots"


def as_uuid(originator_id: UUID | str) -> UUID:
    """The originator id as a UUID; every backend stores and returns UUIDs only."""
    if isinstance(originator_id, UUID):
        return originator_id
    try:
        return UUID(originator_id)
    except (TypeError, ValueError) as error:
        msg = f"Originator id is not a UUID: {originator_id!r}"
        raise DataError(msg) from error


def index_columns(stored_event: StoredEvent) -> tuple[str | None, str | None]:
    """The ``(run_id, lookup_key)`` a stored event is indexed by (NULLs for a plain one)."""
    if isinstance(stored_event, LedgerStoredEvent):
        return stored_event.run_id, stored_event.lookup_key
    return None, None


FenceCondition = tuple[UUID, int, str]
"""``(aggregate id, version, topic)``: no event of that topic stored after that version."""


def fence_conditions(fences: Sequence[Fence]) -> list[FenceCondition]:
    """Each version fence as one condition per topic, the form the backends check."""
    return [
        (as_uuid(fence.aggregate_id), fence.version, topic)
        for fence in fences
        if isinstance(fence, VersionFence)
        for topic in fence.topics
    ]


def index_fences(fences: Sequence[Fence]) -> list[IndexFence]:
    """The index fences among these."""
    return [fence for fence in fences if isinstance(fence, IndexFence)]


class FenceBrokenError(IntegrityError):
    """A fence of the insert no longer held: the command read something another commit has
    changed since (a run claimed meanwhile), so the insert is refused like a version conflict
    and the command runs again, reading."""

    @classmethod
    def of(cls, condition: FenceCondition) -> FenceBrokenError:
        """The error for a version condition found broken."""
        aggregate_id, version, topic = condition
        return cls(f"{topic} stored for {aggregate_id} after version {version}")

    @classmethod
    def of_index(cls, fence: IndexFence) -> FenceBrokenError:
        """The error for an index fence found broken."""
        return cls(f"another aggregate indexed under {fence.lookup_key!r}")


class UuidOriginatorIds(AggregateRecorder):
    """Mixed in before a library recorder: an originator id given as text is read as the UUID
    it names (or refused with ``DataError``), so both spellings find the same events."""

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        # mypy sees only the abstract base; the library recorder after this mixin answers.
        selected: Sequence[StoredEvent] = super().select_events(  # type: ignore[safe-super]
            as_uuid(originator_id), gt=gt, lte=lte, desc=desc, limit=limit
        )
        return selected


LogCondition = tuple[
    Literal["position", "topic", "run_id"], Literal["=", ">", ">=", "<=", "in"], Any
]
"""``(column, operator, value)`` of a log query, which a backend renders; ``in`` takes a list."""


class SqlLogQueries(UuidOriginatorIds, ApplicationRecorder):
    """The log reads of the SQL event recorders, as conditions each backend renders in its
    dialect (``_select``): what a read means is decided here once."""

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        conditions: list[LogCondition] = []
        if start is not None:
            conditions.append(("position", ">=" if inclusive_of_start else ">", start))
        if stop is not None:
            conditions.append(("position", "<=", stop))
        if topics:
            conditions.append(("topic", "in", list(topics)))
        return self._select(conditions, limit)

    def select_log(self, *, after: int, limit: int, run_id: str | None) -> list[Notification]:
        """Notifications after ``after`` in log order; with ``run_id``, that run's only."""
        conditions: list[LogCondition] = [("position", ">", after)]
        if run_id is not None:
            conditions.append(("run_id", "=", run_id))
        return self._select(conditions, limit)

    @abstractmethod
    def _select(self, conditions: Sequence[LogCondition], limit: int) -> list[Notification]:
        """The first ``limit`` notifications meeting every condition, in position order."""


class IndexedEventRecorder(Protocol):
    """What each backend's event recorder answers beyond the library's interface."""

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Originators with an event under ``lookup_key``, by first position."""
        ...

    def select_log(self, *, after: int, limit: int, run_id: str | None) -> Sequence[Any]:
        """Notifications after ``after`` in log order; with ``run_id``, that run's only."""
        ...

    def max_notification_id(self) -> Any:
        """The highest position, or None for an empty log."""
        ...

    @property
    def group(self) -> GroupCommit:
        """The queue its writer threads commit through."""
        ...


EventsT = TypeVar("EventsT", bound=IndexedEventRecorder)
SnapshotsT = TypeVar("SnapshotsT", bound=AggregateRecorder)


class RecorderBackedStorage(Generic[EventsT, SnapshotsT]):
    """The ``EventStorage`` every backend is: its event log and snapshot recorders, and the
    queries answered from the event recorder."""

    reads_ahead = False
    """SQLite reads in this process (its rebuild of 50k events took 1.7-1.85 s reading
    ahead on a second connection, against 1.25 s without); memory has nothing to wait for."""

    def __init__(self, events: EventsT, snapshots: SnapshotsT) -> None:
        self._events = events
        self._snapshots = snapshots

    @property
    def events(self) -> EventsT:
        """The event log, whose notification ids are the positions."""
        return self._events

    @property
    def snapshots(self) -> SnapshotsT:
        """The snapshot store."""
        return self._snapshots

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Aggregates with an event indexed under ``lookup_key``, in log order."""
        return self._events.originator_ids_by_key(lookup_key)

    def select_log(
        self, *, after: int, limit: int, run_id: str | None = None
    ) -> Sequence[Notification]:
        """Stored events after ``after`` in log order; with ``run_id``, that run's only."""
        notifications: Sequence[Notification] = self._events.select_log(
            after=after, limit=limit, run_id=run_id
        )
        return notifications

    def max_position(self) -> int:
        """The highest position in the log (0 when empty)."""
        position: int | None = self._events.max_notification_id()
        return position or 0

    def log_probe(self, after: int) -> LogProbe | None:
        """None: a memory log is read in this process, as cheaply as a probe."""
        del after
        return None

    @property
    def stats(self) -> CommitStats:
        """The counters of this storage's commits (the application's count here too)."""
        return self._events.group.stats

    def group_commits(self, grouping: bool) -> None:
        """Whether writer threads share transactions (False: the bench's baseline)."""
        self._events.group.grouping = grouping
