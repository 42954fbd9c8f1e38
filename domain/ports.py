"""What the domain needs from the rest: a command's aggregates, how a command commits, and
the stored events' lean form followers read. ``infrastructure.commits`` provides them."""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable, Iterator, Sequence
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable
from uuid import UUID

from eventsourcing.application import Application

from runledger.domain.aggregates import Aggregates
from runledger.domain.effects import Effect
from runledger.domain.records import RunClaim
from runledger.domain.runs import Run

T = TypeVar("T")


class LogEntry(NamedTuple):
    """A stored event as followers read it: no UUID parsing, no domain objects."""

    position: int
    topic: str
    originator_id: UUID | str
    originator_version: int
    state: bytes


@runtime_checkable
class SnapshotReads(Protocol):
    """A recorder that reads an aggregate's latest snapshot and its events after it at once
    (``cached_aggregates.PrunableRepository``); stored events are the library's, typed as
    ``Any`` here as in ``Wiring``."""

    def select_from_snapshot(self, originator_id: UUID) -> tuple[Any, Sequence[Any]]:
        """The latest stored snapshot of ``originator_id`` (None: it has none) and its stored
        events after that snapshot's version, in version order."""
        ...


class CommandUnit(Aggregates):
    """The aggregates of one attempt of a command, at the moment it runs (``now``)."""

    now: datetime

    @abstractmethod
    def fenced_run(self, run_id: object, authority: RunClaim | None) -> Run:
        """The run, once ``authority`` may write to it (``Run.fence``), also at the commit:
        a claim committed after the version read here refuses the commit, and the command
        runs again, reading (decision 27)."""

    @abstractmethod
    def effects_of(self, run_id: str) -> Iterator[Effect]:
        """The managed effects reserved on the run, in the order they were reserved."""


Command = Callable[[CommandUnit], T]
"""A command's rules: they read and change the unit's aggregates and return the answer."""


class Commits(Protocol):
    """How a command commits: it runs ``command`` on a fresh unit, saves what it changed in
    one atomic save, and runs it again on a conflict, at most ``attempts`` times (then
    ``exhausted()`` is raised)."""

    def execute(
        self,
        command: Command[T],
        *,
        attempts: int | None = None,
        exhausted: Callable[[], Exception] | None = None,
    ) -> T: ...

    def originator_ids_by_key(self, lookup_key: str) -> list[UUID]:
        """Aggregates with an event indexed under ``lookup_key``, in log order."""
        ...


class Wiring(Protocol):
    """What the composition root plugs into the application: the library's persistence
    parts (typed by the library, which the domain does not import) and how it commits."""

    def mapper(self) -> Any: ...

    def recorder(self) -> Any: ...

    def snapshot_store(self, mapper: Any) -> Any: ...

    def commits(
        self,
        app: Application[UUID],
        load: Callable[[type[Any], UUID], Any],
        now: Callable[[], datetime],
    ) -> Commits: ...

    def archive_of(self, aggregate_id: UUID) -> UUID | None:
        """The tombstone aggregate of the pruned run tree this aggregate was in, if any."""
        ...
