"""Rebuilding read models: blue/green rebuilds and verification while commands keep flowing,
in this process or in several at once.

A build takes the projection's lock (``ViewStore.try_lock``: a lock row with owner and lease,
so only one build of a projection runs at a time, across processes and hosts), replays the
log into a new building slot beside the active one (live pages keep going to the active
slot meanwhile), catches up to the head, and compares:

- same version as the active slot: both are brought to one log position and their rows (what
  the digest covers) must be equal before the switch (a live slot that stalled is not
  compared: the rebuild is its repair); a difference names the first differing rows and
  switches only on ``accept``;
- another version: a row-level summary (added, removed, changed per table) is reported, and
  the switch needs ``accept``.

The switch is one transaction of the view store. A build that crashed leaves its slot
``building`` and the old one answering; the next build of the same version resumes it
(``restart`` starts it afresh). ``verify`` replays into memory and compares with the live
slot at the live slot's position, without a lock and without writing anything.

A build's pages are encoded and committed by a committer process beside it, once it has
started (``views.committer``): the build decodes and applies the next page meanwhile.

Several processes (``rebuild_in_processes``): a rebuild is CPU-bound Python, so threads would
share one core. Each group of projections is replayed by a process of its own, reading the
log itself and committing its own pages; the groups touch disjoint tables and tracking rows,
so they never conflict.

A group's process dies with the process that started it (``die_with_parent``): an operator who
kills a rebuild means stop, so no build goes on, and no switch happens, after the parent is
gone. What a killed build committed stays in its ``building`` slot, and the next rebuild
resumes it (``--restart`` starts afresh); its lock is free as soon as its holder is gone.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from typing import Any, Final

from runledger.domain.errors import (
    ProjectionBuildLockedError,
    ProjectionVersionError,
    RebuildFailedError,
    StorageUnavailableError,
)
from runledger.infrastructure.collector import collector_paused
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.views.committer import Committer, CommitterError, OffloadedCommits
from runledger.infrastructure.views.compare import (
    RowDifference,
    RowHashes,
    TableDiff,
    compare_hashes,
    differences,
    dump,
    dump_digest,
    keys_of,
    raw_summary,
    row_hashes,
    summary,
)
from runledger.infrastructure.views.projector import (
    Progress,
    ProjectionRunner,
    Projector,
    run_pages,
)
from runledger.infrastructure.views.replay import replay
from runledger.infrastructure.views.sql import SlotDifferences, lock_owner
from runledger.infrastructure.views.store import TrackingConflictError, TrackingState, ViewStore
from runledger.projections.base import Projection, Table

logger = logging.getLogger(__name__)


def split(projections: Sequence[Projection], groups: int) -> list[list[str]]:
    """Spread projections over ``groups`` with the heaviest first, each to the lightest group;
    each group by name."""
    buckets: list[list[str]] = [[] for _ in range(groups)]
    loads = [0] * groups
    for projection in sorted(projections, key=lambda p: -p.rebuild_weight):
        lightest = loads.index(min(loads))
        buckets[lightest].append(projection.name)
        loads[lightest] += projection.rebuild_weight
    return [bucket for bucket in buckets if bucket]


_PR_SET_PDEATHSIG: Final = 1
ORPHANED_EXIT_CODE: Final = 70
"""How a group's process ends when it finds its parent gone (``EX_SOFTWARE``)."""


def die_with_parent() -> None:
    """End this spawned process as soon as the process that started it ends.

    On Linux the kernel kills it (``PR_SET_PDEATHSIG``), at once and whatever it is doing;
    elsewhere, and as a fallback, a thread waits for end-of-file on the pipe that
    multiprocessing keeps open from the parent, and exits the process there. Neither needs
    the parent's cooperation, so a parent killed with SIGKILL takes its groups along. A
    transaction cut short this way is rolled back by the database, like any crash.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(ORPHANED_EXIT_CODE)

    threading.Thread(target=watch, name="runledger-parent-watch", daemon=True).start()
    # The parent may have died before the kernel was told to signal its death.
    if not parent.is_alive():
        os._exit(ORPHANED_EXIT_CODE)


GroupRebuild = Callable[[str, list[str], Any, dict[str, Any]], None]
"""Rebuilds one group in a spawned process: ``(url, names, messages, options)``; it reports
on ``messages`` (``("page", n)``, ``("done", [outcome as JSON, ...])``, ``("error", text)``,
or ``("corrupt", text)`` for a corrupt stored event). A module-level function, so the
spawned process can import it by name."""


def default_processes() -> int:
    """How many processes a rebuild of several projections takes by default: half the cores
    this process may run on, at least one.

    Each process reads and decodes the whole log itself and keeps about a core busy, and
    its database takes more: on PostgreSQL its server backend used about half a core
    beside it; on SQLite every process's pages wait for the one write lock. On two cores,
    two processes rebuilt the bench history (50k events, every projection) at 34-36k
    events/s on SQLite and 25-26k on PostgreSQL, one at 43-44k and 32-33k."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    return max(1, cores // 2)


def rebuild_in_processes(
    rebuild_group: GroupRebuild,
    url: str,
    groups: list[list[str]],
    progress: Callable[[int], None] | None,
    options: dict[str, Any] | None = None,
) -> list[Any]:
    """Rebuild each group in its own process; returns what each group reported, together."""
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    processes = [
        context.Process(
            target=rebuild_group, args=(url, group, messages, options or {}), daemon=True
        )
        for group in groups
    ]
    for process in processes:
        process.start()
    finished: list[list[Any]] = []
    errors: list[str] = []
    corrupt = False
    try:
        while len(finished) + len(errors) < len(processes):
            try:
                kind, value = messages.get(timeout=1.0)
            except queue.Empty:
                if not any(process.is_alive() for process in processes):
                    errors.append("a rebuild process died without reporting")
                continue
            if kind == "page" and progress is not None:
                # Every process reads the whole log; report the log's progress, not the sum.
                progress(round(value / len(processes)))
            elif kind == "done":
                finished.append(value)
            elif kind in ("error", "corrupt"):
                errors.append(value)
                corrupt = corrupt or kind == "corrupt"
    finally:
        for process in processes:
            process.join(timeout=60)
    if errors:
        # A WorkflowError, so the CLI reports it (a corrupt event among them) and exits 1.
        raise RebuildFailedError("; ".join(errors), corrupt=corrupt)
    return [outcome for outcomes in finished for outcome in outcomes]


DEFAULT_LEASE_SECONDS: Final = 60.0
"""How long a build's lock holds without a renewal; a build renews it every few pages."""
LOCK_POLL_SECONDS: Final = 0.2
FIRST_DIFFERENCES: Final = 5
COMMITTER_FROM_EVENTS: Final = 20_000
"""The fewest events a build replays to start the committer (``views.committer``) for: it
takes about 0.6 s to start, the time of 15-20k events of a build that commits its own."""
IN_STORE_TRIES: Final = 3
"""Builds caught up to a live copy that live commands keep moving, before a compare by
hashes (a snapshot of the live copy, which the build then catches up to) takes over."""
BUILD_CACHE_ROWS: Final = 2_000
BUILD_CACHE_BYTES: Final = 2 * 1024 * 1024
"""Rows a build keeps decoded, and their JSON's bytes (``views.row_sizes``): a model's rows
can be kilobytes each (viewer deltas, about 500 rows). With rows alone, the build's peak RSS
grew from 102 MB at 100k events of the bench history to 122 MB at 1M; with both, 100-101
and 107 MB (with the committer's, 190 and 197 MB: 1.04x), and the rebuild was as fast."""
BUILD_PAGE_SIZE: Final = 4_000
BUILD_PAGE_SECONDS: Final = 0.2
"""A build's pages are longer than a live catch-up's (``DEFAULT_PAGE_SIZE``, 50 ms), which
keep a command's wait for the SQLite write lock short. A build writes a slot nothing else
writes, and every page costs a transaction and writes each row it changed once, however
often its events changed it: pages of 4,000 events rebuilt the bench history (50k events,
one process) at 43-44k events/s on SQLite and 28-29k on PostgreSQL, against 37-40k and
16-26k with 1,000; 10,000 gained no more."""


@dataclass(frozen=True)
class BuildOutcome:
    """What one blue/green rebuild of a projection did."""

    name: str
    version: int
    active_version: int | None
    """The version that was active when the build compared (None: nothing was active)."""
    slot: int
    read: int
    position: int
    """The log position the two copies were compared at (the build's, for another version)."""
    live_position: int | None
    compared: str
    """``rows`` (same version), ``summary`` (another version) or ``skipped`` (live stalled)."""
    equal: bool
    switched: bool
    dropped: list[int] = field(default_factory=list)
    live_digest: str | None = None
    rebuilt_digest: str | None = None
    """Left out (None) by rebuilds, which compare the rows themselves; ``verify`` gives them."""
    first_differences: list[RowDifference] = field(default_factory=list)
    tables: list[TableDiff] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values, as ``projections rebuild --json`` prints them."""
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> BuildOutcome:
        """The outcome ``as_json`` gave (a rebuild process reports it this way)."""
        values = dict(data)
        values["first_differences"] = [RowDifference(**d) for d in data["first_differences"]]
        values["tables"] = [TableDiff(**d) for d in data["tables"]]
        return cls(**values)


@dataclass(frozen=True)
class VerifyOutcome:
    """What ``verify`` found: the live slot against a scratch replay at the same position."""

    name: str
    version: int
    position: int
    equal: bool
    live_digest: str
    rebuilt_digest: str
    first_differences: list[RowDifference]
    tables: list[TableDiff]

    def as_json(self) -> dict[str, Any]:
        """Plain JSON values, as ``projections verify --json`` prints them."""
        return asdict(self)


class _Lock:
    """The build locks of some projections, renewed while the build runs."""

    def __init__(self, views: ViewStore, names: Sequence[str], lease_seconds: float) -> None:
        self.views = views
        self.names = sorted(names)
        self.lease_seconds = lease_seconds
        self.owner = lock_owner()
        self._renewed = 0.0

    def take(self, *, wait: bool) -> None:
        taken: list[str] = []
        try:
            for name in self.names:
                while (holder := self._try(name)) is not None:
                    if not wait:
                        raise ProjectionBuildLockedError(name=name, holder=holder)
                    time.sleep(LOCK_POLL_SECONDS)
                taken.append(name)
        except BaseException:
            for name in taken:
                self.views.unlock(name, self.owner)
            raise
        self._renewed = time.monotonic()

    def _try(self, name: str) -> str | None:
        return self.views.try_lock(name, self.owner, lease_seconds=self.lease_seconds)

    def renew(self) -> None:
        """Extend the lease now and then; a lock lost meanwhile stops the build."""
        if time.monotonic() - self._renewed < self.lease_seconds / 4:
            return
        for name in self.names:
            holder = self._try(name)
            if holder is not None:
                raise ProjectionBuildLockedError(name=name, holder=holder)
        self._renewed = time.monotonic()

    def release(self) -> None:
        """Give every lock back. A build that failed because the server ended its sessions
        may meet one more ended session here (the server ends them a moment after it says
        so); unlocking is idempotent, so each lock is tried again once, and the others are
        released whatever one of them does. A lock left held would refuse the next build,
        even this process's, until its lease ran out."""
        failed: StorageUnavailableError | None = None
        for name in self.names:
            try:
                try:
                    self.views.unlock(name, self.owner)
                except StorageUnavailableError:
                    self.views.unlock(name, self.owner)
            except StorageUnavailableError as error:
                failed = failed or error
        if failed is not None:
            raise failed


class Builds:
    """Blue/green rebuilds and verification over one store's storage, views and projector."""

    def __init__(
        self,
        storage: EventStorage,
        views: ViewStore,
        projector: Projector,
        *,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
        committer_url: str | None = None,
    ) -> None:
        """``committer_url``: the store's URL, for a committer process (``views.committer``)
        that encodes and commits the builds' pages; None commits them in this process."""
        self.storage = storage
        self.views = views
        self.projector = projector
        self.lease_seconds = lease_seconds
        self._committer_url = committer_url
        self._committer: Committer | None = None
        self._committer_free = threading.Lock()
        """Held by the build using the committer: one page under way at a time is its
        protocol, so a build beside it (other projections) commits its own pages."""

    def rebuild(
        self,
        names: Sequence[str],
        *,
        accept: bool = False,
        drop_old: bool = False,
        restart: bool = False,
        wait: bool = False,
        progress: Progress | None = None,
        on_page: Callable[[], None] | None = None,
        only_outdated: bool = False,
        compare: bool = True,
    ) -> list[BuildOutcome]:
        """Build, compare and (when allowed) switch each named projection, together.

        ``on_page`` runs after every committed page of the build (the tests stop a build
        half-way through with it). Without ``compare`` (a caller that accepts and replaces
        the live models outright) the live slots are neither caught up nor read: their
        outcomes say ``compared="skipped"``.
        """
        lock = _Lock(self.views, names, self.lease_seconds)
        lock.take(wait=wait)
        try:
            projections = [self.projector.runner(name).projection for name in names]
            if only_outdated:
                # Another process may have built this version while we waited for the lock.
                projections = [p for p in projections if self._outdated(p)]
            runners = [self._begin(projection, restart=restart) for projection in projections]

            def paged(count: int) -> None:
                lock.renew()
                if progress is not None:
                    progress(count)
                if on_page is not None:
                    on_page()

            read = self._run(runners, until=None, progress=paged)
            for runner in runners:
                self.views.create_indexes(runner.projection, _slot(runner))
            # Live slots of the same version come to the head too, so that each pair can be
            # compared at one position: in one catch-up, which reads and decodes the log
            # once for all of them (a catch-up each would read it once per projection).
            live = [p.name for p in projections if self.projector.runner(p.name).projecting]
            if live and compare:
                self.projector.catch_up(live)
            return [
                self._finish(
                    runner, read, accept=accept or not compare, drop_old=drop_old, compare=compare
                )
                for runner in runners
            ]
        finally:
            lock.release()

    def _outdated(self, projection: Projection) -> bool:
        active = self.views.registry(projection.name).active
        return active is None or active.version < projection.version

    def plain_rebuild(self, names: Sequence[str]) -> int:
        """Replay the log into new slots beside the active ones, then drop them: a rebuild's
        bare cost, nothing compared or switched (benchmarks set blue/green against it)."""
        projections = [self.projector.runner(name).projection for name in names]
        lock = _Lock(self.views, names, self.lease_seconds)
        lock.take(wait=False)
        try:
            runners = [self._begin(projection, restart=True) for projection in projections]
            read = self._run(runners, until=None, progress=lambda _: lock.renew())
            for runner in runners:
                self.views.create_indexes(runner.projection, _slot(runner))
            for runner in runners:
                self.views.drop_slot(_slot(runner))
            return read
        finally:
            lock.release()

    def upgrade(self, *, wait: bool = True) -> list[BuildOutcome]:
        """Build and switch every projection whose active slot holds an older version."""
        names = [
            runner.name
            for runner in self.projector.runners.values()
            if runner.outdated is not None and runner.outdated.version < runner.projection.version
        ]
        if not names:
            return []
        outcomes = self.rebuild(names, accept=True, wait=wait, only_outdated=True)
        self.projector.reload(names)
        return outcomes

    def _begin(self, projection: Projection, *, restart: bool) -> ProjectionRunner:
        slot = self.views.begin_build(projection, restart=restart)
        runner = ProjectionRunner(
            projection, self.views, BUILD_CACHE_ROWS, slot=slot, cache_bytes=BUILD_CACHE_BYTES
        )
        # A fresh slot is empty: until its cache overflows, a miss means "no row".
        runner.authoritative = slot.position == 0
        return runner

    def _run(
        self, runners: Sequence[ProjectionRunner], *, until: int | None, progress: Progress | None
    ) -> int:
        started = min((runner.position for runner in runners), default=0)
        try:
            return self._pages(runners, until=until, progress=progress, offload=True)
        except CommitterError as error:
            # The committer failed, not the build (a page it refused fails here as well):
            # go on from what each building slot holds, committing in this process.
            logger.warning("a build's committer failed, the build commits its pages: %s", error)
            for runner in runners:
                building = self.views.registry(runner.name).building
                if building is None or building.slot != _slot(runner).slot:
                    raise
                runner.follow(building)
            resumed = min((runner.position for runner in runners), default=0)
            read = self._pages(runners, until=until, progress=progress, offload=False)
            return resumed - started + read

    def _pages(
        self,
        runners: Sequence[ProjectionRunner],
        *,
        until: int | None,
        progress: Progress | None,
        offload: bool,
    ) -> int:
        with (
            collector_paused(),
            self.views.build_commits() as local,
            self._free_committer(runners, until, offload=offload) as committer,
        ):
            build = None if local is None else OffloadedCommits(local, committer)
            read = run_pages(
                self.storage,
                self.views,
                runners,
                page_size=BUILD_PAGE_SIZE,
                page_seconds=BUILD_PAGE_SECONDS,
                progress=progress,
                should_stop=None,
                until=until,
                on_conflict=_lost,
                build=build,
            )
        for runner in runners:
            if runner.failure is not None:
                raise runner.stall_error()
        return read

    def start_committer(self) -> Committer | None:
        """The committer, started if none works yet (None without a URL for it); waits for
        a build that has it."""
        if self._committer_url is None:
            return None
        with self._committer_free:
            return self._started(self._committer_url)

    @property
    def committer(self) -> Committer | None:
        """The committer started for this store's builds, if one was."""
        return self._committer

    def _started(self, url: str) -> Committer | None:
        if self._committer is None or self._committer.broken:
            if self._committer is not None:
                self._committer.close()
                self._committer = None
            try:
                self._committer = Committer(url)
            except (OSError, ValueError) as error:
                # No process to start here (a sandbox, a platform without descriptor
                # passing): builds commit their own pages, as without a committer.
                logger.warning("a build's committer could not start: %s", error)
        return self._committer

    @contextmanager
    def _free_committer(
        self, runners: Sequence[ProjectionRunner], until: int | None, *, offload: bool
    ) -> Iterator[Committer | None]:
        """The committer for a build of ``runners`` (up to ``until``) if ``offload``, unless
        another build has it; started by the first build with ``COMMITTER_FROM_EVENTS``
        ahead of it. Its page under way has settled when the block ends."""
        url = self._committer_url
        if url is None or not offload or not self._committer_free.acquire(blocking=False):
            yield None
            return
        try:
            if self._committer is None or self._committer.broken:
                head = self.storage.max_position() if until is None else until
                ahead = head - min((runner.position for runner in runners), default=head)
                if ahead < COMMITTER_FROM_EVENTS:
                    yield None
                    return
            committer = self._started(url)
            try:
                yield committer
            except BaseException:
                # Already failing: the page under way may fail too; this error says more.
                with suppress(Exception):
                    if committer is not None:
                        committer.settle()
                raise
            if committer is not None:
                committer.settle()
        finally:
            self._committer_free.release()

    def close(self) -> None:
        """End the committer, if one was started."""
        with self._committer_free:
            if self._committer is not None:
                self._committer.close()
                self._committer = None

    def _finish(
        self, runner: ProjectionRunner, read: int, *, accept: bool, drop_old: bool, compare: bool
    ) -> BuildOutcome:
        projection = runner.projection
        outcome = self._compared_in_store(runner, read) if compare else None
        if outcome is None:
            outcome = self._compared_by_hashes(runner, read, compare=compare)
        if not (outcome.equal or outcome.compared == "skipped" or accept):
            return outcome
        building = _slot(runner)
        self.views.switch(projection, building)
        self.projector.reload([projection.name])
        dropped = []
        if drop_old:
            for retired in self.views.retired_slots(projection.name):
                self.views.drop_slot(retired)
                dropped.append(retired.slot)
        return replace(outcome, switched=True, dropped=dropped)

    def _compared_in_store(self, runner: ProjectionRunner, read: int) -> BuildOutcome | None:
        """The rows compared by the database, both copies read in one snapshot with the
        live one no further on than the build; None where the store cannot (memory), or
        where the hashes' path decides (no live copy of this version, a stalled one, or
        live commands that keep moving it past the build)."""
        compare_slots = getattr(self.views, "compare_slots", None)
        if compare_slots is None:
            return None
        projection = runner.projection
        for _ in range(IN_STORE_TRIES):
            building = _slot(runner)
            with self.views.consistent():
                active = self.views.registry(projection.name).active
                if (
                    active is None
                    or active.version != projection.version
                    or active.last_error is not None
                ):
                    return None
                if active.position <= building.position:
                    in_store = partial(_in_store, compare_slots, active, building)
                    return self._rows_outcome(projection, active, building, read, in_store)
            self._run([runner], until=active.position, progress=None)
        return None

    def _compared_by_hashes(
        self, runner: ProjectionRunner, read: int, *, compare: bool
    ) -> BuildOutcome:
        projection = runner.projection
        with self.views.consistent():
            active = self.views.registry(projection.name).active
            live_hashes = (
                self._hashes(projection, active)
                if compare and active is not None and active.version == projection.version
                else None
            )
        try:
            building = _slot(runner)
            if active is not None and active.position > building.position:
                self._run([runner], until=active.position, progress=None)
                building = _slot(runner)
            return self._compare(projection, active, building, live_hashes, read, compare=compare)
        finally:
            for hashes in (live_hashes or {}).values():
                hashes.close()

    def _hashes(self, projection: Projection, slot: TrackingState) -> dict[str, RowHashes]:
        return {
            table.name: row_hashes(table, self.views.stream_rows(table, slot))
            for table in projection.tables
        }

    def _compare(
        self,
        projection: Projection,
        active: TrackingState | None,
        building: TrackingState,
        live_hashes: dict[str, RowHashes] | None,
        read: int,
        *,
        compare: bool = True,
    ) -> BuildOutcome:
        common = _common(projection, active, building, read)
        if (
            not compare
            or active is None
            or (live_hashes is not None and active.last_error is not None)
        ):
            return BuildOutcome(compared="skipped", equal=False, **common)
        if live_hashes is None:
            return BuildOutcome(
                compared="summary",
                equal=False,
                tables=self._version_summary(projection, active, building),
                **common,
            )
        hashes = live_hashes

        # Equal rows are what equal digests mean: the rows as stored are compared by a hash
        # each (a row may be kilobytes of JSON), and only differing ones are read again.
        def by_hashes(table: Table) -> tuple[TableDiff, list[list[Any]]]:
            with self.views.consistent():
                compared = compare_hashes(
                    table,
                    hashes[table.name],
                    self.views.stream_rows(table, building),
                    limit=FIRST_DIFFERENCES,
                )
            keys = compared.differing
            if compared.removed and len(keys) < FIRST_DIFFERENCES:
                with self.views.consistent():
                    rows = self.views.stream_rows(table, active)
                    keys += keys_of(table, rows, compared.removed, FIRST_DIFFERENCES - len(keys))
            return compared.diff, keys

        return self._rows_outcome(projection, active, building, read, by_hashes)

    def _rows_outcome(
        self,
        projection: Projection,
        active: TrackingState,
        building: TrackingState,
        read: int,
        compare_table: Callable[[Table], tuple[TableDiff, list[list[Any]]]],
    ) -> BuildOutcome:
        """The outcome of a row-by-row compare, each table's counts and first differing
        keys given by ``compare_table``."""
        tables: list[TableDiff] = []
        differing: list[tuple[Table, list[Any]]] = []
        for table in projection.tables:
            diff, keys = compare_table(table)
            tables.append(diff)
            differing.extend((table, key) for key in keys[: FIRST_DIFFERENCES - len(differing)])
        equal = not any(d.added or d.removed or d.changed for d in tables)
        return BuildOutcome(
            compared="rows",
            equal=equal and active.position == building.position,
            first_differences=[
                self._difference(projection, table, key, active, building)
                for table, key in differing
            ],
            tables=tables,
            **_common(projection, active, building, read),
        )

    def _difference(
        self,
        projection: Projection,
        table: Table,
        key: list[Any],
        active: TrackingState,
        building: TrackingState,
    ) -> RowDifference:
        values = tuple(key)
        live = self.views.reader({projection.name: active}).get(table, values)
        rebuilt = self.views.reader({projection.name: building}).get(table, values)
        return RowDifference(table.name, list(values), live, rebuilt)

    def _version_summary(
        self, projection: Projection, active: TrackingState, building: TrackingState
    ) -> list[TableDiff]:
        with self.views.consistent():
            old = {name: self.views.raw_rows(name, active) or [] for name in active.tables}
        new = {
            table.name: self.views.raw_rows(table.name, building) or []
            for table in projection.tables
        }
        return raw_summary(old, new, {table.name: table for table in projection.tables})

    def verify(self, name: str, *, progress: Progress | None = None) -> VerifyOutcome:
        """Replay the projection into memory up to the live slot's position and compare."""
        live = self.projector.runner(name)
        projection = live.projection
        if live.projecting:
            self.projector.catch_up([name])
        elif live.failure is not None:
            raise live.stall_error()
        with self.views.consistent():
            active = self.views.registry(name).active
            if active is None or active.version != projection.version:
                raise _other_version(projection, active)
            live_rows = dump(projection, self.views.reader({name: active}))
        scratch = replay(self.storage, [projection], until=active.position, progress=progress)
        rebuilt_rows = dump(projection, scratch)
        live_digest = dump_digest(projection, live_rows)
        # Equal rows give equal digests: the canonical JSON of one copy is enough then.
        equal = live_rows == rebuilt_rows
        rebuilt_digest = live_digest if equal else dump_digest(projection, rebuilt_rows)
        return VerifyOutcome(
            name=name,
            version=projection.version,
            position=active.position,
            equal=equal,
            live_digest=live_digest,
            rebuilt_digest=rebuilt_digest,
            first_differences=differences(live_rows, rebuilt_rows),
            tables=[diff for diff in summary(live_rows, rebuilt_rows) if diff != _same(diff)],
        )


def _in_store(
    compare_slots: Callable[[Table, TrackingState, TrackingState, int], SlotDifferences],
    live: TrackingState,
    building: TrackingState,
    table: Table,
) -> tuple[TableDiff, list[list[Any]]]:
    found = compare_slots(table, live, building, FIRST_DIFFERENCES)
    return TableDiff(table.name, found.added, found.removed, found.changed), found.keys


def _common(
    projection: Projection, active: TrackingState | None, building: TrackingState, read: int
) -> dict[str, Any]:
    """What every outcome of a build's compare says, whatever the compare found."""
    return {
        "name": projection.name,
        "version": projection.version,
        "active_version": None if active is None else active.version,
        "slot": building.slot,
        "read": read,
        "position": building.position,
        "live_position": None if active is None else active.position,
        "switched": False,
    }


def _same(diff: TableDiff) -> TableDiff:
    return TableDiff(diff.table, 0, 0, 0)


def _other_version(projection: Projection, active: TrackingState | None) -> Exception:
    stored = None if active is None else active.version
    return ProjectionVersionError(
        name=projection.name, stored_version=stored, code_version=projection.version
    )


def _slot(runner: ProjectionRunner) -> TrackingState:
    slot = runner.slot
    if slot is None:
        raise RuntimeError(f"the build of {runner.name} has no slot")
    return TrackingState(
        slot.name,
        slot.version,
        runner.position,
        slot.last_error,
        slot.slot,
        slot.state,
        slot.tables,
    )


def _lost(runners: Sequence[ProjectionRunner]) -> None:
    # Only the lock holder writes a building slot: another writer means the lock was lost.
    raise TrackingConflictError(runners[0].name if runners else "?", -1, -1)
