"""Follows the event log and keeps every projection's view up to date, page by page.

A page is at most ``page_size`` events or ``page_seconds`` of work. Each event of the page is
decoded once and given to every projection that has not seen it; the resulting row changes
and new positions of all projections are committed in one transaction. If another writer (a
worker, another embedded host) moved a projection meanwhile, the page is thrown away, the
cache is dropped and the page is recomputed from the new position: nothing is applied twice.

Every event is decoded and checked, also those no projection here consumes: one that does not
decode (``CorruptEventError``) stalls every projection, since a changed wire name may hide an
event any of them needed. The stall is recorded with the error, queries report it, and a
rebuild that meets it raises it. Nothing steps over it.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

import orjson
from eventsourcing.persistence import StoredEvent

from runledger.domain.errors import (
    CorruptEventError,
    ProjectionStalledError,
    StorageUnavailableError,
    UnknownProjectionError,
)
from runledger.domain.ports import EventStorage, LogEntry
from runledger.infrastructure.views.store import (
    PageCommit,
    TableChanges,
    TrackingConflictError,
    ViewStore,
    decode_row,
    encode_row,
)
from runledger.projections.base import Key, ProjectedEvent, Projection, Row, Table
from runledger.projections.events import projected

DEFAULT_PAGE_SIZE: Final = 1000
DEFAULT_PAGE_SECONDS: Final = 0.05
DEFAULT_CACHE_ROWS: Final = 100_000

Progress = Callable[[int], None]


class _PageWriter:
    """The ViewWriter a projection sees during one page: reads its own pending writes.

    Rows are kept decoded and handed out as shallow copies (projections replace nested JSON
    values rather than mutate them, see ``projections.base.ViewWriter``); each changed row is
    encoded once, when the page commits, however often the page rewrote it.
    """

    def __init__(self, runner: ProjectionRunner) -> None:
        self._runner = runner
        self.changes: dict[str, dict[Key, Row | None]] = {}

    def get(self, table: Table, key: Key) -> Row | None:
        key = tuple(key)
        pending = self.changes.get(table.name)
        if pending is not None and key in pending:
            row = pending[key]
        else:
            row = self._runner.cached(table, key)
        return None if row is None else dict(row)

    def put(self, table: Table, row: Row) -> None:
        self.changes.setdefault(table.name, {})[table.key_of(row)] = row

    def delete(self, table: Table, key: Key) -> None:
        self.changes.setdefault(table.name, {})[tuple(key)] = None

    def encoded(self, tables: dict[str, Table]) -> dict[str, TableChanges]:
        return {
            name: {
                key: None if row is None else encode_row(tables[name], row)
                for key, row in changes.items()
            }
            for name, changes in self.changes.items()
        }


def _just_inserted(stored: StoredEvent, position: int) -> ProjectedEvent:
    """A stored event this process built and inserted, as the projections see it.

    Its payload is parsed as the log holds it, so the rows are exactly those a follower
    reading the log projects; the catalogue checks of ``projected`` are skipped, since the
    mapper made this payload from a valid event a moment ago.
    """
    data = orjson.loads(stored.state)
    data.pop("class_version", None)
    return ProjectedEvent(
        position=position,
        wire_name=stored.topic,
        aggregate_id=stored.originator_id,
        version=stored.originator_version,
        data=data,
    )


class SameCommitViews:
    """The ``SameCommit`` step of a process that projects: the pages of its events' read
    models, written in the events' transaction. Used while its projector is held."""

    def __init__(self, projector: Projector) -> None:
        self.projector = projector
        self.written = False
        self._pages: list[PageCommit] | None = None

    def next_position(self) -> int | None:
        return self.projector.next_position()

    def prepare(self, stored_events: Sequence[StoredEvent], positions: Sequence[int]) -> bool:
        self._pages = self.projector.pages_for(stored_events, positions)
        return self._pages is not None

    def write(self, cursor: Any) -> bool:
        if self._pages is None:
            return False
        return self.projector.views.write_with_events(cursor, self._pages)

    def settle(self, written: bool) -> None:
        pages, self._pages = self._pages, None
        if pages is not None:
            self.projector.settle(pages, written=written)
        self.written = written


class ProjectionRunner:
    """One projection's position, row cache and failure state in this process."""

    def __init__(self, projection: Projection, views: ViewStore, cache_rows: int) -> None:
        self.projection = projection
        self.views = views
        self.cache_rows = cache_rows
        self.position = 0
        self.failure: str | None = None
        self.cause: Exception | None = None
        # While rebuilding from an empty view, every row that exists is in the cache, so a
        # miss means "no row" and needs no database round trip.
        self.authoritative = False
        self._cache: OrderedDict[tuple[str, Key], Row | None] = OrderedDict()
        self._tables = {table.name: table for table in projection.tables}
        self._page: _PageWriter | None = None
        self._page_start = 0
        self._uncommitted: dict[str, dict[Key, Row | None]] = {}

    @property
    def name(self) -> str:
        """The projection's stable name."""
        return self.projection.name

    def start(self) -> None:
        """Take the position and failure the view store holds."""
        state = self.views.ensure(self.projection)
        self.position = state.position
        self.failure = state.last_error

    def cached(self, table: Table, key: Key) -> Row | None:
        """A row as of the last commit: from the cache, else the view store."""
        cache_key = (table.name, key)
        if cache_key in self._cache:
            self._cache.move_to_end(cache_key)
            return self._cache[cache_key]
        if self.authoritative:
            return None
        stored = self.views.fetch(table, key)
        row = None if stored is None else decode_row(table, stored)
        self._remember(cache_key, row)
        return row

    def _remember(self, cache_key: tuple[str, Key], row: Row | None) -> None:
        self._cache[cache_key] = row
        if not self.authoritative and len(self._cache) > self.cache_rows:
            self._cache.popitem(last=False)

    def begin_page(self) -> None:
        """Start collecting one page's row changes."""
        self._page = _PageWriter(self)
        self._page_start = self.position

    def apply(self, event: ProjectedEvent) -> None:
        """Give an event of the page to the projection if it has not seen it."""
        page = self._page
        if page is None or event.position <= self.position:
            return
        if event.wire_name in self.projection.topics:
            self.projection.apply(event, page)
        self.position = event.position

    def fail(self, error: Exception, position: int) -> None:
        """Stall at the page's start with ``error``, recorded where every process sees it."""
        self.failure = f"at position {position}: {type(error).__name__}: {error}"
        self.cause = error
        self.abandon(self._page_start)
        self.views.record_error(self.name, self.failure)

    def stall_error(self) -> Exception:
        """What a caller that needed this projection current should raise for its stall."""
        if isinstance(self.cause, CorruptEventError):
            return self.cause
        return ProjectionStalledError(self.name, self.failure)

    def end_page(self) -> PageCommit | None:
        """The page's commit, or None if the page moved nothing."""
        page, self._page = self._page, None
        if page is None or self.position == self._page_start:
            return None
        self._uncommitted = page.changes
        return PageCommit(
            self.projection, self._page_start, self.position, page.encoded(self._tables)
        )

    def committed(self) -> None:
        """The page committed: its rows are now what the cache holds."""
        for table_name, changes in self._uncommitted.items():
            for key, row in changes.items():
                self._remember((table_name, key), row)
        self._uncommitted = {}

    def abandon(self, position: int) -> None:
        """Forget a page that was not committed, and everything cached: rows moved."""
        self._page = None
        self._uncommitted = {}
        self._cache.clear()
        self.authoritative = False
        self.position = position

    def reset(self, *, defer_indexes: bool = False) -> None:
        """Empty the views and start again from position 0."""
        self.views.reset(self.projection, defer_indexes=defer_indexes)
        self._cache.clear()
        self.position = 0
        self.failure = None
        self.cause = None


class Projector:
    """Keeps a set of projections caught up with one event log."""

    def __init__(
        self,
        storage: EventStorage,
        views: ViewStore,
        projections: Iterable[Projection],
        *,
        page_size: int = DEFAULT_PAGE_SIZE,
        page_seconds: float = DEFAULT_PAGE_SECONDS,
        cache_rows: int = DEFAULT_CACHE_ROWS,
    ) -> None:
        self.storage = storage
        self.views = views
        self.page_size = page_size
        self.page_seconds = page_seconds
        self.runners = {p.name: ProjectionRunner(p, views, cache_rows) for p in projections}
        self.projected_with_events = 0
        """Saves whose read models committed in their own transaction (``pages_for``)."""
        self._lock = threading.RLock()
        for runner in self.runners.values():
            runner.start()

    def runner(self, name: str) -> ProjectionRunner:
        """The runner of the named projection, or ``UnknownProjectionError``."""
        # A name that is not text (a list, say) is unknown too, not an unhashable TypeError.
        runner = self.runners.get(name) if isinstance(name, str) else None
        if runner is None:
            raise UnknownProjectionError(name, ", ".join(self.runners))
        return runner

    def catch_up(
        self,
        names: Sequence[str] | None = None,
        *,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
    ) -> int:
        """Project every event not yet seen; returns how many events were read.

        ``should_stop`` is asked between pages, so a worker stops promptly on a signal
        without ever leaving a page half-applied.
        """
        with self._lock:
            selected = (
                [self.runner(name) for name in names] if names else list(self.runners.values())
            )
            self._recheck_failures(selected)
            read = 0
            while should_stop is None or not should_stop():
                active = [runner for runner in selected if runner.failure is None]
                if not active:
                    return read
                start = min(runner.position for runner in active)
                entries = self.storage.read_log(after=start, limit=self.page_size)
                if not entries:
                    return read
                applied = self._project_page(active, entries)
                if len(entries) < self.page_size and applied == len(entries):
                    # A short page was the end of the log when it was read; one more read
                    # would only say so again (what arrives meanwhile wakes a new catch-up).
                    read += applied
                    if progress is not None and applied:
                        progress(applied)
                    return read
                read += applied
                if progress is not None and applied:
                    progress(applied)
            return read

    def _project_page(self, active: list[ProjectionRunner], entries: Sequence[LogEntry]) -> int:
        deadline = time.monotonic() + self.page_seconds
        for runner in active:
            runner.begin_page()
        applied = 0
        for entry in entries:
            try:
                event = projected(entry)
            except CorruptEventError as error:
                for runner in active:
                    if runner.failure is None:
                        runner.fail(error, entry.position)
                break
            for runner in active:
                if runner.failure is not None:
                    continue
                try:
                    runner.apply(event)
                except StorageUnavailableError:
                    # The database failed, not the projection: forget the page, so the next
                    # catch-up projects it again, rather than stalling a sound projection.
                    for each in active:
                        each.abandon(each._page_start)
                    raise
                except Exception as error:  # a broken projection must not stop the others
                    runner.fail(error, event.position)
            applied += 1
            if time.monotonic() > deadline:
                break
        commits = [commit for runner in active if (commit := runner.end_page()) is not None]
        try:
            self.views.commit(commits)
        except TrackingConflictError:
            self._refresh(active)
            return 0
        except Exception:
            # Nothing was written: forget the page, so the next catch-up projects it again.
            for commit in commits:
                self.runners[commit.projection.name].abandon(commit.expected_position)
            raise
        for commit in commits:
            self.runners[commit.projection.name].committed()
        return applied

    def next_position(self) -> int | None:
        """The position after every projection's, if they are all there and none stalled."""
        positions = {runner.position for runner in self.runners.values()}
        if len(positions) != 1 or any(r.failure is not None for r in self.runners.values()):
            return None
        return positions.pop() + 1

    def pages_for(
        self, stored_events: Sequence[StoredEvent], positions: Sequence[int]
    ) -> list[PageCommit] | None:
        """The page of every projection for events just inserted at ``positions``, projected
        from the events in memory (the caller holds this projector); None when they cannot
        be projected now.

        Only if every projection is exactly at the position before the first one and the
        positions are contiguous: then no other writer's event lies between or before them
        unprojected (on PostgreSQL a foreign position in the range, committed or not, breaks
        contiguity), so tracking may move past them with the gap-safe follower's guarantee.
        """
        first = positions[0]
        if positions[-1] - first + 1 != len(positions):
            return None
        runners = list(self.runners.values())
        if any(runner.failure is not None or runner.position != first - 1 for runner in runners):
            return None
        events = [_just_inserted(s, p) for s, p in zip(stored_events, positions, strict=True)]
        for runner in runners:
            runner.begin_page()
        try:
            for event in events:
                for runner in runners:
                    runner.apply(event)
        except Exception:
            # A projection that fails here fails the same way in the catch-up that follows,
            # which records the stall where every process sees it; the events commit alone.
            for runner in runners:
                runner.abandon(first - 1)
            return None
        return [commit for runner in runners if (commit := runner.end_page()) is not None]

    def settle(self, pages: Sequence[PageCommit], *, written: bool) -> None:
        """``pages_for``'s pages committed with their events, or did not (forget them)."""
        if written:
            self.projected_with_events += 1
        for page in pages:
            runner = self.runners[page.projection.name]
            if written:
                runner.committed()
            else:
                runner.abandon(page.expected_position)

    def try_lock(self) -> bool:
        """Take this projector if nobody is projecting (pair with ``unlock``)."""
        return self._lock.acquire(blocking=False)

    def unlock(self) -> None:
        """Release the projector taken with ``try_lock``."""
        self._lock.release()

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Hold this process's projections still while another process works on the views."""
        with self._lock:
            yield

    def reload(self, names: Sequence[str]) -> None:
        """Take positions and failures from the view store (another process moved them)."""
        with self._lock:
            for name in names:
                runner = self.runner(name)
                runner.abandon(0)
                runner.start()

    def recheck_failures(self, names: Sequence[str]) -> None:
        """Forget failures that another process has rebuilt away."""
        with self._lock:
            self._recheck_failures([self.runner(name) for name in names])

    def _recheck_failures(self, runners: Iterable[ProjectionRunner]) -> None:
        """A failure another process has since rebuilt away no longer stalls this one."""
        failed = [runner for runner in runners if runner.failure is not None]
        if not failed:
            return
        states = {state.name: state for state in self.views.tracking()}
        for runner in failed:
            state = states.get(runner.name)
            if state is not None and state.last_error is None:
                runner.failure = None
                runner.abandon(state.position)

    def _refresh(self, runners: Iterable[ProjectionRunner]) -> None:
        positions = {state.name: state.position for state in self.views.tracking()}
        for runner in runners:
            runner.abandon(positions.get(runner.name, 0))

    def rebuild(self, names: Sequence[str], *, progress: Progress | None = None) -> int:
        """Drop the named projections' views and replay the whole log into them, together.

        A projection that stalls on the way stops the rebuild with its error (the
        ``CorruptEventError`` itself for an event that does not decode): a rebuild never
        ends quietly short of the log's end.
        """
        with self._lock:
            runners = [self.runner(name) for name in names]
            for runner in runners:
                runner.reset(defer_indexes=True)
                runner.authoritative = True
            try:
                read = self.catch_up(names, progress=progress)
            finally:
                for runner in runners:
                    runner.abandon(runner.position)
                    self.views.create_indexes(runner.projection)
            for runner in runners:
                if runner.failure is not None:
                    raise runner.stall_error()
            return read
