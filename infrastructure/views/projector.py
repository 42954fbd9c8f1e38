"""Follows the event log and keeps every projection's view up to date, page by page.

A page is at most ``page_size`` events or ``page_seconds`` of work. Each event of the page is
decoded once and given to every projection that has not seen it; the resulting row changes
and new positions of all projections are committed in one transaction. If another writer (a
worker, another embedded host) moved a projection meanwhile, the page is thrown away and the
projection goes on from the new position: nothing is applied twice. The rows it holds are
kept where the events in between can be replayed into them (``ProjectionRunner.fast_forward``)
and dropped otherwise.

Every event is decoded and checked, also those no projection here consumes: one that does not
decode (``CorruptEventError``) stalls every projection, since a changed wire name may hide an
event any of them needed. The stall is recorded with the error, queries report it, and a
rebuild that meets it raises it. Nothing steps over it.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from typing import Final, TypeVar

from eventsourcing.persistence import StoredEvent

from runledger.domain.errors import (
    CorruptEventError,
    ProjectionStalledError,
    StorageUnavailableError,
    UnknownProjectionError,
)
from runledger.domain.ports import LogEntry
from runledger.domain.serialisation import stored_payload
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.storage.archived import TOMBSTONE_TOPICS
from runledger.infrastructure.telemetry import TELEMETRY
from runledger.infrastructure.views.catch_up_statistics import CatchUpStatistics
from runledger.infrastructure.views.read_ahead import ReadAhead
from runledger.infrastructure.views.row_sizes import RowSizes, levelled_evictions
from runledger.infrastructure.views.store import (
    BuildCommits,
    EncodedRow,
    PageCommit,
    PageRows,
    TableChanges,
    TrackingConflictError,
    TrackingState,
    ViewStore,
    decode_row,
    encode_changes,
    encode_key,
)
from runledger.projections.base import Key, ProjectedEvent, Projection, Row, Table
from runledger.projections.events import projected

DEFAULT_PAGE_SIZE: Final = 1000
DEFAULT_PAGE_SECONDS: Final = 0.05
DEFAULT_CACHE_ROWS: Final = 100_000
DEFAULT_CACHE_BYTES: Final = 16 * 1024 * 1024
"""A live runner's cache holds at most this much of its rows' JSON (``row_sizes``): about
50 MB decoded, 4,000 viewer-delta run rows or 30,000 follow-up rows."""

Progress = Callable[[int], None]
_Page = TypeVar("_Page", PageCommit, PageRows)

logger = logging.getLogger(__name__)


class _PageWriter:
    """The ViewWriter a projection sees during one page: reads its own pending writes.

    Rows are kept decoded and handed out as shallow copies (projections replace nested JSON
    values rather than mutate them, see ``projections.base.ViewWriter``); each changed row is
    encoded once, when the page commits, however often the page rewrote it.
    """

    def __init__(self, committed: Callable[[Table, Key], Row | None]) -> None:
        """``committed``: a row as of the page's start (``ProjectionRunner.cached``, or
        ``held`` for a replay, which must not read the view store)."""
        self._committed = committed
        self.changes: dict[str, dict[Key, Row | None]] = {}

    def get(self, table: Table, key: Key) -> Row | None:
        key = tuple(key)
        pending = self.changes.get(table.name)
        if pending is not None and key in pending:
            row = pending[key]
        else:
            row = self._committed(table, key)
        return None if row is None else dict(row)

    def put(self, table: Table, row: Row) -> None:
        self.changes.setdefault(table.name, {})[table.key_of(row)] = row

    def delete(self, table: Table, key: Key) -> None:
        self.changes.setdefault(table.name, {})[tuple(key)] = None

    def encoded(self, tables: dict[str, Table], *, plain: bool) -> dict[str, TableChanges]:
        """The page's changes as stored (``plain``: see ``ViewStore.plain``), keyed by their
        stored keys (``encode_key``)."""
        return {
            name: encode_changes(tables[name], changes, plain=plain)
            for name, changes in self.changes.items()
        }


class _UncachedError(Exception):
    """A replayed event read a row this process does not hold (``ProjectionRunner.held``)."""


REWRITTEN: Final = object()
"""A committed JSON value a page replaced, as ``_as_stored`` gives it: stored alike with no
value (``views.sql._same`` compares types first), so the column is written."""


def _as_stored(old: Row, new: Row, new_stored: EncodedRow, table: Table) -> EncodedRow:
    """A committed row as stored, for comparing column by column with the page's row, without
    encoding its JSON: a JSON value the page kept is the very object (projections copy what
    they change, as the cache requires), so its stored text is the new row's; any other is
    taken as changed (at worst an equal value is written again). Encoding the old values
    was a third of the read-model step of an ``append_session_events``, whose revision row
    holds the batch's records (py-spy, P10 on SQLite)."""
    stored = dict(old)
    for name in table.json_columns:
        stored[name] = new_stored[name] if old[name] is new[name] else REWRITTEN
    # A compact value is text in the row: an equal one is stored as the new row's is.
    for name in table.compact_columns:
        stored[name] = new_stored[name] if old[name] == new[name] else REWRITTEN
    return stored


def _just_inserted(stored: StoredEvent, position: int) -> ProjectedEvent:
    """A stored event this process built and inserted, as the projections see it.

    Its payload is parsed as the log holds it, so the rows are exactly those a follower
    reading the log projects; the catalogue checks of ``projected`` are skipped, since the
    mapper made this payload from a valid event a moment ago.
    """
    data = stored_payload(stored, position)
    data.pop("class_version", None)
    return ProjectedEvent(
        position=position,
        wire_name=stored.topic,
        aggregate_id=stored.originator_id,
        version=stored.originator_version,
        data=data,
    )


class ProjectionRunner:
    """One projection's slot, position, row cache and failure state in this process.

    A live runner projects into the active slot while that slot holds the code's version;
    while it holds another (``outdated``), the runner projects nothing: pages computed by
    this code must not land in tables built by other code. A build runner projects into a
    building slot.
    """

    def __init__(
        self,
        projection: Projection,
        views: ViewStore,
        cache_rows: int,
        slot: TrackingState | None = None,
        *,
        cache_bytes: int | None = None,
    ) -> None:
        """``cache_rows``, and ``cache_bytes`` of their JSON unless None, bound the rows
        the runner keeps (``_trim``)."""
        self.projection = projection
        self.views = views
        self.cache_rows = cache_rows
        self._sizes = None if cache_bytes is None else RowSizes(cache_bytes)
        self.position = 0
        self.failure: str | None = None
        self.cause: Exception | None = None
        self.catch_up_error: str | None = None
        """Why this process's last catch-up failed, until one succeeds: not a stall (the
        projection is sound, the next catch-up tries again), so it stays out of the tracking."""
        self.slot: TrackingState | None = None
        self.outdated: TrackingState | None = None
        """The active slot when it holds another version than this code's."""
        # While rebuilding from an empty view, every row that exists is in the cache, so a
        # miss means "no row" and needs no database round trip (in a table that has not
        # given up a row since).
        self.authoritative = False
        self._cache: dict[str, OrderedDict[Key, Row | None]] = {}
        """The committed rows, in one least-recently-used order per table."""
        self._cached = 0
        """How many rows ``_cache`` holds in all (``cache_rows`` at most)."""
        self._evicted: set[str] = set()
        """The tables that gave up a row to the bound: a miss there must ask the store."""
        self._uncached = frozenset(t.name for t in projection.tables if not t.cached)
        """Tables whose rows the cache never keeps (``Table.cached``): a miss asks the store."""
        self._tables = {table.name: table for table in projection.tables}
        self._page: _PageWriter | None = None
        self._page_start = 0
        self._fetched_in_page = False
        """Whether the page under way read a row from the view store (``forget_page``)."""
        self._uncommitted: dict[str, dict[Key, Row | None]] = {}
        self._in_flight: dict[str, dict[Key, Row | None]] = {}
        """The rows of the page whose commit is under way (``committing``)."""
        if slot is not None:
            self.follow(slot)

    @property
    def name(self) -> str:
        """The projection's stable name."""
        return self.projection.name

    @property
    def projecting(self) -> bool:
        """Whether this runner has a slot of its version and no failure."""
        return self.slot is not None and self.failure is None

    def start(self) -> None:
        """Take the active slot, its position and failure from the view store."""
        self.follow(self.views.ensure(self.projection))

    def follow(self, state: TrackingState) -> None:
        """Project into ``state``'s slot from its position, if it holds this code's version."""
        self._forget_rows()
        self._in_flight = {}
        self.authoritative = False
        if state.version != self.projection.version:
            self.slot, self.outdated = None, state
            return
        self.slot, self.outdated = state, None
        self.position = state.position
        self.failure = state.last_error
        self.cause = None

    def cached(self, table: Table, key: Key) -> Row | None:
        """A row as of the last commit: from the cache, else the view store."""
        rows = self._cache.get(table.name)
        if rows is not None and key in rows:
            rows.move_to_end(key)
            return rows[key]
        if (
            self.authoritative
            and table.name not in self._evicted
            and table.name not in self._uncached
        ):
            return None
        in_flight = self._in_flight.get(table.name)
        if in_flight is not None and key in in_flight:
            # The store may not hold it yet. A row the page under way leaves alone, the store
            # holds as of that page's start, which is also as of its end.
            row = in_flight[key]
            self._remember(table.name, key, row)
            return row
        if self.slot is None:
            raise TrackingConflictError(self.name, self.position, -1)
        try:
            stored_key = encode_key(table, key, plain=self.views.plain)
            stored = self.views.fetch(table, stored_key, self.slot)
        except StorageUnavailableError:
            # The server, not the slot: a lost connection says nothing of who holds it.
            raise
        except Exception:
            # Another process switched this projection to a new slot and dropped the old
            # tables: that is a moved projection, not a broken one.
            if not self._still_active():
                raise TrackingConflictError(self.name, self.position, -1) from None
            raise
        row = None if stored is None else decode_row(table, stored)
        self._fetched_in_page = self._fetched_in_page or self._page is not None
        self._remember(table.name, key, row)
        return row

    def held(self, table: Table, key: Key) -> Row | None:
        """A row the cache holds, or ``_UncachedError``: never read from the view store."""
        rows = self._cache.get(table.name)
        if rows is None or key not in rows:
            raise _UncachedError((table.name, key))
        rows.move_to_end(key)
        return rows[key]

    def fast_forward(self, events: Sequence[ProjectedEvent], to: int) -> bool:
        """Move to ``to``, which another process projected and committed, keeping the cache:
        the events in between are applied to the cached rows alone. Their rows in the store
        are what that process computed from the same rows by the same code (the slot holds
        one version), so the cache stays the store's as of ``to``. Only when every row they
        read is cached: any other row is in the store as of ``to``, not as of the event that
        reads it, and then the cache is dropped (``abandon``) as before. ``events`` must hold
        every event after this runner's position up to ``to``. Whether the cache was kept."""
        # Others write rows this process never saw: a miss no longer means "no row".
        self.authoritative = False
        # Reads only what the cache holds and the replay's own writes: the store holds any
        # other row as of the other process's commit, not as of the replayed event.
        replay = _PageWriter(self.held)
        try:
            for event in events:
                if (
                    self.position < event.position <= to
                    and event.wire_name in self.projection.topics
                ):
                    self.projection.apply(event, replay)
        # _UncachedError, or a projection failing where it did not for the other process.
        except Exception:
            self.abandon(to)
            return False
        self._remember_all(replay.changes)
        self.position = to
        return True

    @property
    def cached_rows(self) -> int:
        """How many rows the cache holds."""
        return self._cached

    @property
    def holds_rows(self) -> bool:
        """Whether the cache holds any row (a replay into an empty one cannot keep any)."""
        return self._cached > 0

    def _still_active(self) -> bool:
        active = self.views.registry(self.name).active
        return self.slot is not None and active is not None and active.slot == self.slot.slot

    def _remember(self, table_name: str, key: Key, row: Row | None) -> None:
        self._keep(table_name, key, row)
        self._trim()

    def _remember_all(self, changes: Mapping[str, Mapping[Key, Row | None]]) -> None:
        """Cache a page's rows, then trim once to the bound."""
        for table_name, rows in changes.items():
            for key, row in rows.items():
                self._keep(table_name, key, row)
        self._trim()

    def _keep(self, table_name: str, key: Key, row: Row | None) -> None:
        """Cache a row without minding the bound (``_trim`` does, once per batch)."""
        if table_name in self._uncached:
            return
        rows = self._cache.get(table_name)
        if rows is None:
            rows = self._cache[table_name] = OrderedDict()
        if key not in rows:
            self._cached += 1
        rows[key] = row
        if self._sizes is not None and row is not None:
            self._sizes.kept(table_name, row)

    def _trim(self) -> None:
        """Back to the bound. Every evicted row is committed, so from there a miss must ask
        the view store: a rebuild of a big model streams through a bounded cache, not all of
        it. The largest table gives its oldest rows up: a table of a few rows that every
        event reads (a session's message counter) never does. In one order for all tables
        the big tables' rows pushed those out, and a rebuild of the bench history on
        PostgreSQL fetched them again 193 times, a round trip each (the server on this
        machine hid them behind the page commits; one across a network would not).

        A page's rows are evicted together (``levelled_evictions``), not row by row: finding
        the largest table for every row was 6 % of a PostgreSQL rebuild (py-spy, P3). With a
        bound in bytes too (``row_sizes``), the tables heaviest in bytes then come down to it."""
        excess = self._cached - self.cache_rows
        if excess > 0:
            self._evict(
                levelled_evictions({name: len(rows) for name, rows in self._cache.items()}, excess)
            )
        sizes = self._sizes
        # Weighed only when the rows could be over the bound, as the heaviest table's.
        if sizes is not None and self._cached * sizes.heaviest > sizes.limit:
            self._evict(sizes.evictions({name: len(r) for name, r in self._cache.items()}))

    def _evict(self, counts: Mapping[str, int]) -> None:
        """Drop each table's ``counts`` least recently used rows."""
        for name, count in counts.items():
            if not count:
                continue
            rows = self._cache[name]
            for _ in range(count):
                rows.popitem(last=False)
            self._evicted.add(name)
            self._cached -= count

    def _forget_rows(self) -> None:
        self._cache.clear()
        self._cached = 0
        self._evicted.clear()

    def begin_page(self) -> None:
        """Start collecting one page's row changes."""
        self._page = _PageWriter(self.cached)
        self._page_start = self.position
        self._fetched_in_page = False

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
        self.abandon_page()
        if self.slot is not None:
            self.views.record_error(self.slot, self.failure)

    def stall_error(self) -> Exception:
        """What a caller that needed this projection current should raise for its stall."""
        if isinstance(self.cause, CorruptEventError):
            return self.cause
        return ProjectionStalledError(name=self.name, failure=self.failure)

    def end_page(self) -> PageCommit | None:
        """The page's commit, or None if the page moved nothing."""
        page = self._ended_page()
        if page is None or self.slot is None:
            return None
        encoded = page.encoded(self._tables, plain=self.views.plain)
        return PageCommit(
            self.projection,
            self._page_start,
            self.position,
            encoded,
            self.slot,
            self._previous(page, encoded)
            if self.views.partial_updates and not (self.authoritative and not self._evicted)
            else {},
        )

    def end_page_rows(self) -> PageRows | None:
        """The page's rows unencoded, for a committer that encodes them itself (``PageRows``:
        with no ``previous`` rows, so each changed row is written whole), or None if the
        page moved nothing."""
        page = self._ended_page()
        if page is None or self.slot is None:
            return None
        return PageRows(self.name, self._page_start, self.position, page.changes, self.slot)

    def _ended_page(self) -> _PageWriter | None:
        """The page under way, now ended, if it moved this runner; its rows are uncommitted
        until ``committed`` (or ``committing``) takes them into the cache."""
        page, self._page = self._page, None
        if page is None or self.position == self._page_start:
            return None
        self._uncommitted = page.changes
        return page

    def _previous(
        self, page: _PageWriter, encoded: Mapping[str, TableChanges]
    ) -> dict[str, dict[Key, EncodedRow]]:
        """The committed rows the cache holds for the page's upserts, as stored. The cache is
        the slot as of the page's start (a page that finds the slot moved commits nothing),
        and a projection reads a row before it rewrites it, so most changed rows are here."""
        previous: dict[str, dict[Key, EncodedRow]] = {}
        for table_name, changes in page.changes.items():
            table = self._tables[table_name]
            cached: Mapping[Key, Row | None] = self._cache.get(table_name, {})
            # ``encoded`` holds the same changes in the same order, by their stored keys.
            known = {
                stored_key: _as_stored(old, row, stored, table)
                for (key, row), (stored_key, stored) in zip(
                    changes.items(), encoded[table_name].items(), strict=True
                )
                # A row and its encoding are both None (a delete) or neither.
                if row is not None and stored is not None and (old := cached.get(key)) is not None
            }
            if known:
                previous[table_name] = known
        return previous

    def committed(self) -> None:
        """The page committed: its rows are now what the cache holds."""
        self._remember_all(self._uncommitted)
        self._uncommitted = {}

    def committing(self) -> None:
        """The page's commit is under way and the page before it committed (``PageCommits``):
        its rows are the cache's from now, and until the next page's a miss looks in them
        before it asks the store."""
        self._in_flight = self._uncommitted
        self.committed()

    def abandon_page(self) -> None:
        """Forget the page under way: back to the position it started from."""
        self.abandon(self._page_start)

    def forget_page(self, position: int) -> None:
        """Forget a page from ``position`` that was not committed, back at its start. The
        cache is kept when it is the page under way and it read every row from the cache:
        then the cache is still the store's as of the page's start. A row the page fetched
        may be as another process left it after that (whose commit is why this page failed),
        so then the cache is dropped."""
        if self._fetched_in_page or position != self._page_start:
            self.abandon(position)
            return
        self._page = None
        self._uncommitted = {}
        self.position = self._page_start

    def abandon(self, position: int) -> None:
        """Forget a page that was not committed, and everything cached: rows moved."""
        self._page = None
        self._uncommitted = {}
        self._in_flight = {}
        self._forget_rows()
        self.authoritative = False
        self.position = position


def read_page(
    storage: EventStorage, after: int, page_size: int, until: int | None
) -> Sequence[LogEntry]:
    """The next page of the log after ``after``, cut at position ``until`` if given."""
    if until is not None and after >= until:
        return []
    entries = storage.read_log(after=after, limit=page_size)
    if until is not None and entries and entries[-1].position > until:
        entries = [entry for entry in entries if entry.position <= until]
    return entries


def project_page(
    views: ViewStore,
    active: Sequence[ProjectionRunner],
    entries: Sequence[LogEntry],
    page_seconds: float,
    build: BuildCommits | None = None,
) -> int:
    """Apply one page of the log to the runners and commit it in one transaction; returns how
    many entries it covered. On ``TrackingConflictError`` nothing was written and the runners'
    pages are forgotten; the caller decides where each runner goes on from.

    With ``build`` (a build's ``ViewStore.build_commits``) the page goes through it, whose
    commit may still be under way when this returns: the next page waits for it, or
    ``build`` as it closes, and raises what it failed with."""
    deadline = time.monotonic() + page_seconds
    # A stall is recorded once the page under way committed, whose tracking update would
    # clear it otherwise.
    settled = _nothing if build is None else build.settle
    for runner in active:
        runner.begin_page()
    applied = 0
    for entry in entries:
        try:
            event = projected(entry)
        except CorruptEventError as error:
            settled()
            for runner in active:
                if runner.failure is None:
                    runner.fail(error, entry.position)
            break
        for runner in active:
            if runner.failure is not None:
                continue
            try:
                runner.apply(event)
            except TrackingConflictError:
                # The page's slot is no longer the active one: forget the page, nothing was
                # written; the caller goes on from the store's active slots.
                for each in active:
                    each.abandon_page()
                raise
            except StorageUnavailableError:
                # The database failed, not the projection: forget the page, so the next
                # catch-up projects it again, rather than stalling a sound projection.
                for each in active:
                    each.abandon_page()
                raise
            except Exception as error:  # a broken projection must not stop the others
                settled()
                runner.fail(error, event.position)
        applied += 1
        if time.monotonic() > deadline:
            break
    if build is not None:
        _send_page(build, active)
        return applied
    commits = [(runner, commit) for runner in active if (commit := runner.end_page()) is not None]
    try:
        views.commit([commit for _, commit in commits])
    except Exception:
        # Nothing was written: forget the page, so the next catch-up projects it again.
        for runner, commit in commits:
            runner.forget_page(commit.expected_position)
        raise
    for runner, _ in commits:
        runner.committed()
    return applied


def _send_page(build: BuildCommits, active: Sequence[ProjectionRunner]) -> None:
    """Send a build's page once the one before it committed; its rows go unencoded where
    ``build`` takes them. A page is encoded before the wait for the one before it, whose
    commit the server works on meanwhile."""
    if build.takes_rows():
        rows = [(runner, page) for runner in active if (page := runner.end_page_rows()) is not None]
        _after_the_last(build, rows, build.send_rows)
    else:
        commits = [(r, commit) for r in active if (commit := r.end_page()) is not None]
        _after_the_last(build, commits, build.send)


def _after_the_last(
    build: BuildCommits,
    pages: list[tuple[ProjectionRunner, _Page]],
    send: Callable[[list[_Page]], None],
) -> None:
    """Once the page before committed, take ``pages``' rows as the cache's and send them."""
    build.settle()
    for runner, _ in pages:
        runner.committing()
    send([page for _, page in pages])


def _nothing() -> None:
    pass


CONTENDED_SECONDS = 5.0
"""How long after a tracking conflict a catch-up first checks what others projected."""


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
        cache_bytes: int | None = DEFAULT_CACHE_BYTES,
    ) -> None:
        self.storage = storage
        self.views = views
        self.page_size = page_size
        self.page_seconds = page_seconds
        self.cache_rows = cache_rows
        self.runners = {
            p.name: ProjectionRunner(p, views, cache_rows, cache_bytes=cache_bytes)
            for p in projections
        }
        self._contended_until = 0.0
        """Until when (monotonic) another process is taken to project this log too."""
        self._lock = threading.RLock()
        self.statistics = CatchUpStatistics(self._analyze_live_slots)
        for runner in self.runners.values():
            runner.start()

    def runner(self, name: str) -> ProjectionRunner:
        """The runner of the named projection, or ``UnknownProjectionError``."""
        # A name that is not text (a list, say) is unknown too, not an unhashable TypeError.
        runner = self.runners.get(name) if isinstance(name, str) else None
        if runner is None:
            raise UnknownProjectionError(name=name, known=", ".join(self.runners))
        return runner

    def catch_up(
        self,
        names: Sequence[str] | None = None,
        *,
        progress: Progress | None = None,
        should_stop: Callable[[], bool] | None = None,
        until: int | None = None,
    ) -> int:
        """Project every event not yet seen (up to ``until``); returns how many events were read.

        ``should_stop`` is asked between pages, so a worker stops promptly on a signal
        without ever leaving a page half-applied.
        """
        with self._lock:
            selected = (
                [self.runner(name) for name in names] if names else list(self.runners.values())
            )
            self._recheck_failures(selected)
            contended = self.contended
            read = run_pages(
                self.storage,
                self.views,
                selected,
                page_size=self.page_size,
                page_seconds=self.page_seconds,
                progress=progress,
                should_stop=should_stop,
                until=until,
                on_conflict=self._refresh,
                before_page=self._skip_projected if contended else None,
            )
            # Under the lock: a caller that waited for this catch-up (a query's, say) then
            # reads with the statistics it brought, not with the stale ones beside them.
            positions = [runner.position for runner in selected]
            self.statistics.projected(read, max(positions, default=0))
            return read

    def _analyze_live_slots(self) -> None:
        """``ViewStore.analyze`` of the slots this process projects into; a failure (a slot
        another process dropped meanwhile) costs only the statistics, autovacuum's later."""
        slots = [
            (runner.projection, runner.slot)
            for runner in self.runners.values()
            if runner.slot is not None and runner.failure is None
        ]
        try:
            self.views.analyze(slots)
        except Exception:
            logger.warning(
                "statistics of the read models not updated after a catch-up", exc_info=True
            )

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
        for page in pages:
            runner = self.runners[page.projection.name]
            if written:
                runner.committed()
            else:
                runner.forget_page(page.expected_position)

    @property
    def contended(self) -> bool:
        """Whether another process lately projected the same views and won a page (see
        ``CONTENDED_SECONDS``)."""
        return time.monotonic() < self._contended_until

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
        """Take slots, positions and failures from the view store (another process moved them)."""
        with self._lock:
            self.views.refresh()
            for name in names:
                runner = self.runner(name)
                runner.abandon(0)
                runner.start()

    def record_catch_up(self, error: Exception | None) -> None:
        """How the last catch-up of every projection ended (``error``, or None: it succeeded),
        for each projecting runner's ``catch_up_error``."""
        for runner in self.runners.values():
            runner.catch_up_error = (
                f"catch-up failed at position {runner.position}: {type(error).__name__}: {error}"
                if error is not None and runner.projecting
                else None
            )

    def recheck_failures(self, names: Sequence[str]) -> None:
        """Forget failures that another process has rebuilt away."""
        with self._lock:
            self._recheck_failures([self.runner(name) for name in names])

    def _recheck_failures(self, runners: Iterable[ProjectionRunner]) -> None:
        """A failure another process has since rebuilt away no longer stalls this one, and a
        slot of this code's version that another process switched to is followed."""
        waiting = [r for r in runners if r.failure is not None or r.outdated is not None]
        if not waiting:
            return
        states = self.views.refresh()
        for runner in waiting:
            state = states.get(runner.name)
            if state is None:
                continue
            if runner.outdated is not None:
                if state.version == runner.projection.version:
                    runner.follow(state)
                else:
                    runner.outdated = state
            elif state.last_error is None:
                runner.failure = None
                runner.follow(state)

    def _skip_projected(self, runners: Iterable[ProjectionRunner]) -> None:
        """Move past what another process projected since, before projecting it again.

        Processes that each project their own commands also catch up on each other's: the
        one that commits a page first wins, and every other one would project the page in
        vain (reading rows one by one), wait on the winner's row locks and fail its
        compare-and-set. One read of the tracking tells them to skip instead, and one read
        of the events skipped keeps the rows they hold (``_move_past``).
        """
        states = {state.name: state for state in self.views.tracking()}
        self._move_past(
            {
                runner: state.position
                for runner in runners
                if (state := states.get(runner.name)) is not None
                and runner.slot is not None
                and state.slot == runner.slot.slot
                and state.position > runner.position
            }
        )

    def _move_past(self, moved: Mapping[ProjectionRunner, int]) -> None:
        """Move each runner to the position another process projected its slot to, keeping
        its cache where the events in between can be replayed into it (``fast_forward``)."""
        keeping = {runner: position for runner, position in moved.items() if runner.holds_rows}
        events = (
            self._projected_between(
                min(runner.position for runner in keeping), max(keeping.values())
            )
            if keeping
            else None
        )
        for runner, position in moved.items():
            if events is None or runner not in keeping:
                runner.abandon(position)
            else:
                runner.fast_forward(events, position)

    def _projected_between(self, after: int, until: int) -> list[ProjectedEvent] | None:
        """Every event after ``after`` up to ``until`` (which other processes projected), to
        replay into the caches; None when that is more than a page or one does not decode.

        Reading them is one query, where dropping the caches cost a query for every row the
        next page reads again: four processes taking turns on one run fetched the run's
        rows anew on each turn, under the run's lock (py-spy, P2b on PostgreSQL)."""
        # At most a page of positions: one read of ``page_size`` holds all of them.
        if until - after > self.page_size:
            return None
        # Every position up to ``until`` is settled (a process projected past it), so a hole
        # below it (a rolled-back insert) must not end the read short, as it would for a
        # follower while other writers are open: a replay missing an event is wrong rows.
        entries = [
            entry
            for entry in self.storage.read_log(
                after=after, limit=self.page_size, settled_through=until
            )
            if entry.position <= until
        ]
        if any(entry.topic in TOMBSTONE_TOPICS for entry in entries):
            # A prune moves the tracking over its tombstone with rows it deletes itself, not
            # rows a projection makes of the event: no replay gives them.
            return None
        try:
            return [projected(entry) for entry in entries]
        except CorruptEventError:
            return None

    def _refresh(self, runners: Iterable[ProjectionRunner]) -> None:
        """After a conflict: go on from where the store's active slots are now, and check
        before each page for a while (``_skip_projected``): other processes project too."""
        self._contended_until = time.monotonic() + CONTENDED_SECONDS
        states = self.views.refresh()
        moved: dict[ProjectionRunner, int] = {}
        for runner in runners:
            state = states.get(runner.name)
            if state is None:
                runner.abandon(0)
            elif runner.slot is not None and state.slot == runner.slot.slot:
                if state.position > runner.position:
                    moved[runner] = state.position
                else:
                    runner.abandon(state.position)
            else:
                runner.follow(state)
        self._move_past(moved)


def run_pages(
    storage: EventStorage,
    views: ViewStore,
    selected: Sequence[ProjectionRunner],
    *,
    page_size: int,
    page_seconds: float,
    progress: Progress | None,
    should_stop: Callable[[], bool] | None,
    until: int | None,
    on_conflict: Callable[[Sequence[ProjectionRunner]], None],
    before_page: Callable[[Sequence[ProjectionRunner]], None] | None = None,
    build: BuildCommits | None = None,
) -> int:
    """Page through the log for the runners until they reach its end (or ``until``);
    ``before_page`` may move them on before each page is read; ``build``: see
    ``project_page`` (its owner closes it, which waits for the last page)."""
    read = 0
    # What a page read but had no time to apply (``page_seconds``), and the position just
    # before it: the next page starts there, so it is not read and fetched again.
    ahead: Sequence[LogEntry] = ()
    ahead_after = -1
    # A build reads its next page while it projects this one; a live catch-up does not: its
    # pages are short and mostly the log's end.
    next_pages = (
        ReadAhead(lambda after: read_page(storage, after, page_size, until))
        if build is not None and storage.reads_ahead
        else None
    )
    with TELEMETRY.catch_up() as pages, next_pages or nullcontext():
        while should_stop is None or not should_stop():
            active = [runner for runner in selected if runner.projecting]
            if not active:
                return read
            if before_page is not None:
                before_page(active)
            start = min(runner.position for runner in active)
            if ahead and start == ahead_after:
                entries, ahead = ahead, ()
                # Cut from a page that was full: the log went on past it.
                full = True
            else:
                taken = next_pages.take(start) if next_pages is not None else None
                entries = (
                    taken if taken is not None else read_page(storage, start, page_size, until)
                )
                full = len(entries) >= page_size
                if full and next_pages is not None:
                    next_pages.ask(entries[-1].position)
            if not entries:
                return read
            try:
                names = [runner.name for runner in active]
                with pages.page(names, entries[0].position, entries[-1].position):
                    applied = project_page(views, active, entries, page_seconds, build)
            except TrackingConflictError:
                on_conflict(active)
                continue
            if 0 < applied < len(entries):
                ahead, ahead_after = entries[applied:], entries[applied - 1].position
            read += applied
            pages.applied(applied)
            if progress is not None and applied:
                progress(applied)
            if not full and applied == len(entries):
                # A short page was the end of the log when it was read; one more read
                # would only say so again (what arrives meanwhile wakes a new catch-up).
                return read
    return read
