"""The machinery behind one open store: the application, its storage and its read models.

``open_runtime(url)`` builds it. The CLI, the projection worker, the benchmarks and the tests
work with it directly (they need the storage, the views and the projector); a host gets the
``WorkflowStore`` over it, which forwards only the public API.
"""

from __future__ import annotations

import functools
import itertools
import logging
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from types import TracebackType
from typing import Any, Final, Self, TypeVar

from runledger.domain.application import Clock, WorkflowRuns, utc_now
from runledger.domain.errors import (
    CorruptEventError,
    InvalidStorePathError,
    InvalidStoreUrlError,
    ProjectionStalledError,
    ProjectionVersionError,
    ReadModelsBehindError,
    StorageUnavailableError,
    StoreClosedError,
    WorkflowError,
)
from runledger.domain.records import ProjectionStatus
from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.commits.same_commit import SameCommitReadModels
from runledger.infrastructure.commits.wiring import StorageWiring
from runledger.infrastructure.event_log import EventLog
from runledger.infrastructure.storage.log_probes import LogMovedError, LogProbe
from runledger.infrastructure.storage.replicas import ReadPosition, ReplicaReads, WrittenPositions
from runledger.infrastructure.storage.urls import SQLITE_PREFIX, redact_url, sqlite_path, store_url
from runledger.infrastructure.telemetry import (
    PROJECTION,
    READ_MODELS_SPAN,
    REBUILD_SPAN,
    SAME_COMMIT,
    STATE,
    STORE,
    TELEMETRY,
    VERIFY_SPAN,
)
from runledger.infrastructure.views.digest import view_digest
from runledger.infrastructure.views.lag import ProjectionLag, projection_lags
from runledger.infrastructure.views.leadership import ProjectorLeadership, leadership_key
from runledger.infrastructure.views.projector import (
    Progress,
    ProjectionRunner,
    Projector,
)
from runledger.infrastructure.views.rebuild import (
    BuildOutcome,
    Builds,
    VerifyOutcome,
    die_with_parent,
    rebuild_in_processes,
    split,
)
from runledger.infrastructure.views.replay import check_as_of, replay
from runledger.infrastructure.views.store import ViewReaderBase, ViewStore
from runledger.projections import (
    follow_up_queue,
    runs,
    session_outbox,
    settings,
    terminal_data,
    viewer_deltas,
)
from runledger.projections.base import Projection

DEFAULT_URL: Final = "sqlite:///runledger.db"
URL_VARIABLE: Final = "RUNLEDGER_URL"
CATCH_UP_ATTEMPTS: Final = 3
IDLE_SECONDS: Final = 1.0
"""How long the follower sleeps when nothing wakes it: then it looks at the log, and a process
that does not project tries to take the lead (``views.leadership``)."""
LEADER_BID_SECONDS: Final = 0.05
"""How long such a query waits before it tries to take the lead itself (the leader may be
gone), and again after each such try."""
LEADER_WAIT_SECONDS: Final = 2.0
"""How long a query of a process that does not project waits for the elected one to bring
the views up to the log's head, before it projects them itself."""

logger = logging.getLogger(__name__)
T = TypeVar("T")
_RUNTIME_NUMBERS: Final = itertools.count(1)


def default_projections() -> list[Projection]:
    """Every read model of runledger, by its stable name."""
    return [
        follow_up_queue.FollowUpQueueProjection(),
        terminal_data.TerminalDataProjection(),
        viewer_deltas.ViewerDeltasProjection(),
        session_outbox.SessionOutboxProjection(),
        settings.SettingsProjection(),
        runs.RunsProjection(),
    ]


class ClosedOnExit(ABC):
    """A context manager whose ``with`` block ends in ``close()``."""

    __slots__ = ()

    @abstractmethod
    def close(self) -> None:
        """Release what this holds; closing again does nothing."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()


class _Calls:
    """The calls in progress on a store: closing waits for them and refuses new ones.

    Connections must not close under a running statement (sqlite3 can crash the interpreter
    when another thread closes the connection it is reading from).
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._running: set[object] = set()
        self._closed = False

    @contextmanager
    def running(self) -> Iterator[None]:
        """Hold the store open for one call; ``StoreClosedError`` once it is closing."""
        # Each call is a token in a set, not a count: the ``finally`` removes it whether or
        # not it went in, so a Ctrl-C raised on the way in, before or after the add, leaves
        # nothing behind for ``close`` to wait for. (A count went up outside the ``try``, and
        # the ``with`` block's exit between the two could raise.)
        call = object()
        try:
            with self._changed:
                if self._closed:
                    raise StoreClosedError()
                self._running.add(call)
            yield
        finally:
            with self._changed:
                self._running.discard(call)
                if not self._running:
                    self._changed.notify_all()

    def close(self) -> None:
        """Refuse new calls, then wait for the running ones to end."""
        with self._changed:
            self._closed = True
            self._changed.wait_for(lambda: not self._running)


class StoreRuntime(ClosedOnExit):
    """One open store's parts: the application, event storage, views, projector and follower."""

    def __init__(
        self,
        storage: EventStorage,
        views: ViewStore,
        *,
        url: str,
        clock: Clock = utc_now,
        allow_host_session_recording: bool = False,
        embedded_projections: bool = True,
        projections: Sequence[str] | None = None,
    ) -> None:
        self.url = url
        self.storage = storage
        self.views = views
        self.embedded_projections = embedded_projections
        chosen = [p for p in default_projections() if projections is None or p.name in projections]
        self.projector = Projector(storage, views, chosen)
        self.builds = Builds(
            storage,
            views,
            self.projector,
            # A process of its own encodes and commits a build's pages beside it (P3 on
            # SQLite 30.5k -> 41.5k events/s, on PostgreSQL 5-8 % faster, where the server's
            # backend shares the second core with it); not in memory, where the rows are
            # this process's own.
            committer_url=None if url == "memory://" else url,
        )
        self.stats = storage.stats
        self._leadership = self._elect() if embedded_projections else None
        self._read_models = SameCommitReadModels(
            self.projector if embedded_projections else None, self.stats, projects=self._projects
        )
        wiring = StorageWiring(
            storage,
            on_commit=self._committed if embedded_projections else None,
            # Always given, so every commit has its span; without embedded read models the
            # step it yields is None (the events commit alone).
            same_commit=self._read_models.step,
            stats=self.stats,
        )
        self.app = WorkflowRuns(
            wiring, clock=clock, allow_host_session_recording=allow_host_session_recording
        )
        self.log = EventLog(storage, self.app.mapper)
        self._reader = views.reader()
        self._replicated = storage if isinstance(storage, ReplicaReads) else None
        self._adopted = WrittenPositions()
        self._closed = False
        self._calls = _Calls()
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._follower: threading.Thread | None = None
        self._views_listeners: list[Callable[[], None]] = []
        self._told_head = 0
        # Memory stores are told apart in metrics by this (an id() is reused once freed).
        self._number = next(_RUNTIME_NUMBERS)
        TELEMETRY.watch(self)
        if embedded_projections:
            # A projection whose code is newer than its active slot is built beside it
            # (blue/green) before this store answers from it; other processes keep reading
            # the old slot meanwhile.
            self.builds.upgrade()
            self.catch_up()
            self._follower = threading.Thread(
                target=self._follow, name="runledger-projections", daemon=True
            )
            self._follower.start()

    def __repr__(self) -> str:
        return f"StoreRuntime({redact_url(self.url)!r})"

    def _elect(self) -> ProjectorLeadership | None:
        """This process's part in electing who projects, where processes can hear each
        other's commits and the URL does not ask every one to project (``projecting``)."""
        conninfo = self.listen_conninfo
        channel = getattr(getattr(self.storage, "events", None), "channel_name", None)
        if conninfo is None or not isinstance(channel, str):
            return None
        if not getattr(self.storage, "elects_projector", False):
            return None
        key = leadership_key(
            channel, [(name, r.projection.version) for name, r in self.projector.runners.items()]
        )
        leadership = ProjectorLeadership(conninfo, channel, key)
        leadership.lead()
        return leadership

    def _projects(self) -> bool:
        """Whether this process projects commits itself: it keeps read models, and leads
        where processes elect one (as of the follower's last look)."""
        return self.embedded_projections and (self._leadership is None or self._leadership.leading)

    @property
    def leads_projection(self) -> bool:
        """Whether this process is the one projecting the store's commits (always, where
        there is no election: SQLite, memory, ``projecting=every``, no LISTEN)."""
        return self._projects()

    @property
    def printable_url(self) -> str:
        """The store URL as it may be printed or logged: without its password."""
        return redact_url(self.url)

    def running(self) -> AbstractContextManager[None]:
        """Hold the store open for one call (``StoreClosedError`` once it is closing)."""
        return self._calls.running()

    @property
    def backend(self) -> str:
        """The URL's scheme: ``sqlite``, ``postgresql`` (or ``postgres``) or ``memory``."""
        return self.url.split(":", 1)[0]

    @property
    def listen_conninfo(self) -> str | None:
        """Where a LISTEN for other processes' commits connects; None where there is none to
        hear (SQLite, memory) or no session may LISTEN (a transaction pooler without
        ``listen_url``), and followers poll."""
        conninfo: str | None = getattr(self.storage, "listen_conninfo", None)
        return conninfo

    # -- projections follow the log in-process ---------------------------------------------

    def _committed(self) -> None:
        # When the read models committed with the events (the commit span says so), this
        # process reads its writes already.
        # Read even when not projecting: it resets the thread's answer for its next save.
        if not self._read_models.took_last_commit() and self._projects():
            with TELEMETRY.span(READ_MODELS_SPAN, **{SAME_COMMIT: False}):
                if self.projector.contended or not self._try_catch_up():
                    # Right after each commit: the committing thread projects it when nobody
                    # else is projecting (no thread hand-over, no contention); otherwise the
                    # follower thread picks it up with whatever else arrives, and a query
                    # catches up first. Other processes projecting the same views (their
                    # commits are what kept this one's views from going with it) make it
                    # the follower's too: each command here projecting their pages (a
                    # transaction of its own, their rows fetched one by one, racing them for
                    # each page) made four writer processes slower than one: P2 on PostgreSQL
                    # 225-331 commands/s, 622-670/s in the follower's longer pages.
                    self._wake.set()
        # Whoever projected it (this thread, the commit itself, or the follower soon), a query
        # made from now on sees it: listeners may look.
        self._views_advanced()

    def _try_catch_up(self) -> bool:
        if not self.projector.try_lock():
            return False
        try:
            self.catch_up()
        finally:
            self.projector.unlock()
        return True

    def _follow(self) -> None:
        while not self._closing.is_set():
            projecting = self._take_part()
            leadership = self._leadership
            if projecting and leadership is not None:
                # The leader projects every process's commits: it sleeps on the NOTIFY of
                # other processes' commits. Its own commits it projects as they commit
                # (with their events, or right after them): a follower projecting them too
                # would take the projector from under its next command, whose events would
                # then commit alone. A commit that handed its views over (``_wake``) is
                # seen at the next notification or idle look, not at once: woken at once,
                # the follower's catch-up met the next command's commit, which handed over
                # again, command after command (measured: 8 of 64 commands wrote their
                # views with their events, against 64 of 64).
                notified = leadership.wait(IDLE_SECONDS, self._closing, ignored=self._own)
                woken = notified or self._wake.is_set()
            else:
                woken = self._wake.wait(timeout=IDLE_SECONDS)
            self._wake.clear()
            if not self._closing.is_set():
                if projecting and (woken or self._behind_the_log()):
                    self.catch_up()
                self._tell_if_the_log_moved()

    def _own(self, backend: int) -> bool:
        """Whether a server process is one of this store's connections."""
        own: frozenset[int] = getattr(self.storage, "own_backends", frozenset())
        return backend in own

    def _take_part(self) -> bool:
        """Whether to project now; a process that takes the lead first takes the views'
        slots and positions as the store has them (the leader before moved them)."""
        leadership = self._leadership
        if leadership is None:
            return True
        was = leadership.leading
        if leadership.lead() and not was:
            self.projector.reload(self.projection_names())
        return leadership.leading

    def _behind_the_log(self) -> bool:
        """Whether the log holds events past this process's projections, or they are not all
        at one good position. An idle look that finds nothing to do leaves the projector
        alone: a command's step that found it taken would leave its views to a catch-up."""
        position = self.projector.next_position()
        if position is None:
            return True
        try:
            return self.storage.max_position() >= position
        except WorkflowError:
            return True

    def catch_up(self, *, progress: Progress | None = None) -> int:
        """Bring every projection up to the end of the log; returns events read.

        A command has already committed when this runs, so a storage failure here must not
        look like a failed command: it is logged and shown as each projection's
        ``last_error`` in ``projection_status`` until a catch-up succeeds, and the next
        catch-up tries again.
        """
        try:
            return self._catch_up(progress)
        except Exception:
            logger.exception("projection catch-up failed %d times", CATCH_UP_ATTEMPTS)
            return 0

    def _catch_up(self, progress: Progress | None = None) -> int:
        """``catch_up``, raising the last error once every attempt failed (and recorded)."""
        for attempt in range(CATCH_UP_ATTEMPTS):
            try:
                read = self.projector.catch_up(progress=progress)
            except Exception as error:
                if attempt + 1 == CATCH_UP_ATTEMPTS:
                    self.projector.record_catch_up(error)
                    raise
                # A failed page is forgotten by the projector; a busy or briefly unreachable
                # database usually lets the next attempt through.
                logger.exception("projection catch-up failed (attempt %d)", attempt + 1)
                time.sleep(0.01 * (attempt + 1))
            else:
                self.projector.record_catch_up(None)
                return read
        return 0

    def _catch_up_to_read(self, names: Sequence[str] | None = None) -> None:
        """Catch up before a query, or fail it: an answer from views that could not take
        this process's last commits would break read-your-writes without a word. A process
        that does not project waits for the one that does instead (``_led_views_reached``),
        and projects itself only when that takes too long."""
        if not self._projects():
            chosen = list(names) if names else self.projection_names()
            if self._led_views_reached(chosen):
                # Its runners' stalls and slots are as it last projected: a stall the leader
                # rebuilt away, or a slot it switched to, is taken from the store.
                self.projector.recheck_failures(chosen)
                return
            # The leader is gone, stalled or slow: this process's projector has not moved
            # while it followed, so it first takes the views as the store has them.
            self.projector.reload(chosen)
        try:
            self._catch_up()
        except WorkflowError:
            raise
        except Exception as error:
            raise ReadModelsBehindError(error) from error

    def _led_views_reached(self, names: Sequence[str]) -> bool:
        """Whether the views ``names`` reach the log's head as a query starts (every commit
        so far, this process's among them, and the positions it adopted), as one that
        catches up would show, within ``LEADER_WAIT_SECONDS``; False at once where one has
        no active slot or recorded a failure (the query's own catch-up then finds why)."""
        needed = max(self.storage.max_position(), self._adopted.current.position)
        started = time.monotonic()
        deadline = started + LEADER_WAIT_SECONDS
        bid_at = started + LEADER_BID_SECONDS
        pause = 0.0005
        while True:
            states = {state.name: state for state in self.views.tracking()}
            found = [states.get(name) for name in names]
            if any(state is None or state.last_error is not None for state in found):
                return False
            if all(state is not None and state.position >= needed for state in found):
                return True
            now = time.monotonic()
            if now >= bid_at:
                # Not there yet: the leader may have gone (closed, or lost its session).
                # Whoever needs the views tries for the lead then, without waiting for its
                # follower's next look; taking it, the query projects them as the leader.
                # Else the leader may sit on commits of its own: asked, it looks now.
                if self._take_part():
                    return False
                if self._leadership is not None:
                    self._leadership.nudge()
                bid_at = now + LEADER_BID_SECONDS
            if now >= deadline:
                logger.warning(
                    "read models not at position %d after %.1fs of waiting for the process "
                    "that projects; projecting here",
                    needed,
                    LEADER_WAIT_SECONDS,
                )
                return False
            time.sleep(pause)
            pause = min(pause * 1.5, 0.005)

    def add_views_listener(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` whenever the read models may have advanced; returns its removal.

        It is called on whichever thread committed or projected, so it must be quick and
        thread-safe (hand over to its own thread or event loop); a change may be told twice.
        """
        self._views_listeners.append(listener)
        return lambda: self._views_listeners.remove(listener)

    def _tell_if_the_log_moved(self) -> None:
        # Other processes' commits, whoever projected them (they, or a query of this process
        # catching up): the log's head shows them. One cheap query a second, with listeners.
        if not self._views_listeners:
            return
        try:
            head = self.storage.max_position()
        except WorkflowError as error:
            logger.warning("views listeners not told: %s", error)
            return
        if head != self._told_head:
            self._told_head = head
            self._views_advanced()

    def _views_advanced(self) -> None:
        for listener in list(self._views_listeners):
            try:
                listener()
            except Exception:
                # A listener's fault must not look like a failed command that has committed.
                logger.exception("views listener failed")

    def reader(self, name: str, *, as_of: int | None = None) -> ViewReaderBase:
        """The views, once projection ``name`` has what this process wrote (read-your-writes);
        with ``as_of``, a scratch replay of the log up to that position instead."""
        runner = self.projector.runner(name)
        if as_of is not None:
            position = check_as_of(as_of, self.storage.max_position())
            return replay(self.storage, [runner.projection], until=position)
        if self.embedded_projections:
            self._catch_up_to_read([name])
        else:
            self.projector.recheck_failures([name])
        self._check_current(runner)
        return self._reader

    # -- reads from replicas, with read-your-writes -----------------------------------------

    def read_position(self) -> ReadPosition:
        """What a read of this store must see: its own commits and the tokens it adopted."""
        own = ReadPosition() if self._replicated is None else self._replicated.written.current
        return own.merged(self._adopted.current)

    def position_token(self) -> str:
        """``read_position`` as an opaque token for another process's ``reading_after``."""
        return self.read_position().token()

    def reading_after(self, token: object) -> None:
        """From now on, reads of this store see what the token's store had written."""
        adopted = ReadPosition.from_token(token)
        self._adopted.advance(adopted.lsn, adopted.position)

    def replicated(self, read: Callable[[], T], view: str | None = None) -> T:
        """``read()`` on a replica that has this store's read position (else the primary).

        For a read of read model ``view`` the replica must also show it at the log position
        of those writes, in the slot this process reads: the view rows may have been
        committed by another process (a worker, another host that caught up first), so the
        writes' own WAL position does not cover them, but the tracking row commits with them.
        Without embedded projections the views promise no read-your-writes on the primary
        either, so only the WAL position is waited for.
        """
        if self._replicated is None:
            return read()
        needed = self.read_position()
        ready = None
        if view is not None and self.embedded_projections:
            runner = self.projector.runner(view)
            ready = functools.partial(self._replica_has_view, runner, needed.position)
        return self._replicated.read_from_replica(read, needed, ready)

    def _replica_has_view(self, runner: ProjectionRunner, position: int) -> bool:
        # Run with this thread's reads on the replica.
        states = {state.name: state for state in self.views.tracking()}
        shown = states.get(runner.name)
        reading = self.views.active_slot(runner.projection.tables[0])
        return shown is not None and shown.slot == reading.slot and shown.position >= position

    def query(self, name: str, ask: Callable[[ViewReaderBase], T], *, as_of: int | None) -> T:
        """``ask`` read model ``name``, once it has this process's writes (``reader``), on a
        replica when one has them too (``replicated``). On a server, first as the views
        stand, the log's check riding on the first read (``_probed``)."""
        if as_of is None:
            answered = self._probed(name, ask)
            if answered is not None:
                return answered[0]
        reader = self.reader(name, as_of=as_of)
        if as_of is not None:
            return ask(reader)
        return self.replicated(lambda: ask(reader), name)

    def _probed(self, name: str, ask: Callable[[ViewReaderBase], T]) -> tuple[T] | None:
        """``ask``'s answer from the views as they stand, if they hold every commit made
        before it (``_probe_for``, ``storage.log_probes``); None where they may not, or it
        cannot tell, and the query goes the usual way. The position is read under the
        projector's lock, taken only if free: a same-commit step holding it has moved the
        position past what committed."""
        replicas = self._replicated is not None and self._replicated.reads_replicas
        if replicas or not self.embedded_projections:
            return None
        probe = self._probe_for(name)
        if probe is None:
            return None
        try:
            with self.views.probing(probe):
                answer = ask(self._reader)
        except LogMovedError:
            return None
        except StorageUnavailableError:
            # A call waits for a pooled connection once (pool_timeout): the usual way would
            # wait again, three times over.
            raise
        except Exception:
            # An error read from views behind the log (a run not there yet) is no answer.
            if self._log_moved(probe):
                return None
            raise
        return None if self._log_moved(probe) else (answer,)

    def _log_moved(self, probe: LogProbe) -> bool:
        """Whether ``probe`` found the views possibly behind; a look that fails counts so, and
        the query goes the usual way, whose errors say what is wrong."""
        try:
            return self.views.moved(probe)
        except Exception:
            return True

    def _probe_for(self, name: str) -> LogProbe | None:
        """The look a query of ``name`` carries: where this process projects, whether the
        log holds anything past its projection's position; where it waits for the process
        that does (``_led_views_reached``), whether the stored views stand at the log's head
        and at the positions adopted. None where the usual way must decide (a stalled or
        outdated projection, a busy projector)."""
        runner = self.projector.runner(name)
        if runner.failure is not None or runner.outdated is not None:
            return None
        if not self._projects():
            if self._leadership is None:
                return None
            return self.views.reached_probe(name, self._adopted.current.position)
        if not self.projector.try_lock():
            return None
        try:
            # Read again under the lock: a catch-up that held it may have stalled the runner.
            if runner.failure is not None or runner.slot is None:
                return None
            return self.storage.log_probe(runner.position)
        finally:
            self.projector.unlock()

    @staticmethod
    def _check_current(runner: ProjectionRunner) -> None:
        if runner.outdated is not None:
            projection = runner.projection
            raise ProjectionVersionError(
                name=runner.name,
                stored_version=runner.outdated.version,
                code_version=projection.version,
            )
        if runner.failure is not None:
            raise ProjectionStalledError(name=runner.name, failure=runner.failure)

    def read_model_digest(self, name: str, *, as_of: int | None = None) -> str:
        """The digest of the read model: live (once current), or as of a log position."""
        runner = self.projector.runner(name)
        if as_of is not None:
            return view_digest(runner.projection, self.reader(name, as_of=as_of))
        if self.embedded_projections:
            self._catch_up_to_read([name])
        self._check_current(runner)

        def digest() -> str:
            with self.views.consistent():
                return view_digest(runner.projection, self.views.reader())

        return self.replicated(digest, name)

    # -- operations -------------------------------------------------------------------------

    def projection_names(self) -> list[str]:
        """The names of the projections this runtime keeps."""
        return list(self.projector.runners)

    def projection_status(self) -> list[ProjectionStatus]:
        """Each projection's name, version, position and lag of its active slot, the active
        and building versions, and the last error."""
        if self._projects():
            self.catch_up()
        head = self.storage.max_position()
        statuses = []
        for name, runner in self.projector.runners.items():
            registry = self.views.registry(name)
            active, building = registry.active, registry.building
            position = 0 if active is None else active.position
            error = None if active is None else active.last_error
            if runner.outdated is not None and error is None:
                error = ProjectionVersionError(
                    name=name,
                    stored_version=runner.outdated.version,
                    code_version=runner.projection.version,
                ).message
            if error is None:
                error = runner.catch_up_error
            statuses.append(
                ProjectionStatus(
                    name=name,
                    version=runner.projection.version,
                    position=position,
                    lag=max(0, head - position),
                    active_version=None if active is None else active.version,
                    building_version=None if building is None else building.version,
                    building_position=None if building is None else building.position,
                    last_error=error,
                )
            )
        return sorted(statuses, key=lambda status: status.name)

    def projection_lags(self) -> list[ProjectionLag]:
        """How far each read model is behind the log now, as every process sees it."""
        return projection_lags(self.storage, self.views, self.projection_names(), self.app.now())

    @property
    def metrics_label(self) -> str:
        """The store as a metric names it: its URL without password (memory: one per store)."""
        if self.backend == "memory":
            return f"memory://#{self._number}"
        return self.printable_url

    def observe(self) -> Iterator[tuple[str, float, dict[str, Any]]]:
        """This store's gauge readings: each read model's lag and stall, its pool's use."""
        store = {STORE: self.metrics_label}
        for lag in self.projection_lags():
            labels = {**store, PROJECTION: lag.name}
            yield "runledger.projection.lag.events", lag.events, labels
            yield "runledger.projection.lag.duration", lag.seconds, labels
            yield "runledger.projection.stalled", int(lag.stalled), labels
        usage = self.storage.pool_usage() if hasattr(self.storage, "pool_usage") else None
        if usage is not None:
            used, idle, waiting = usage
            yield "runledger.pool.connection.count", used, {**store, STATE: "used"}
            yield "runledger.pool.connection.count", idle, {**store, STATE: "idle"}
            if waiting is not None:
                yield "runledger.pool.pending_requests", waiting, store

    def rebuild_projection(self, name: str, *, progress: Progress | None = None) -> int:
        """Rebuild the projection blue/green and switch to it, dropping the old tables;
        returns the events replayed."""
        [outcome] = self.rebuild_blue_green([name], accept=True, drop_old=True, progress=progress)
        return outcome.read

    def rebuild_projections(
        self,
        names: Sequence[str] | None = None,
        *,
        progress: Progress | None = None,
        processes: int = 1,
    ) -> int:
        """Rebuild several projections (default: all) and switch to them, dropping the old
        tables; returns the events replayed (see ``rebuild_blue_green``). The old models are
        replaced whatever they hold: not caught up to compare first (a second replay when
        they lag far behind, as after a host that does not project)."""
        outcomes = self.rebuild_blue_green(
            names, drop_old=True, progress=progress, processes=processes, compare=False
        )
        return max((outcome.read for outcome in outcomes), default=0)

    def rebuild_blue_green(
        self,
        names: Sequence[str] | None = None,
        *,
        accept: bool = False,
        drop_old: bool = False,
        restart: bool = False,
        progress: Progress | None = None,
        processes: int = 1,
        compare: bool = True,
    ) -> list[BuildOutcome]:
        """Build each projection (default: all) beside its active slot, compare, and switch
        when equal (or on ``accept``); see ``views.rebuild``. Without ``compare`` the live
        models are replaced without being caught up or read (``rebuild_projections``).

        With ``processes`` > 1 (SQLite and PostgreSQL) the projections are split over that
        many processes, each replaying the log into its group's tables. The processes are
        spawned, so a script calling this needs the usual ``if __name__ == "__main__":``.

        The one way a store rebuilds: ``rebuild_projection``, ``rebuild_projections`` and each
        process of a split rebuild (``rebuild_group``) come here.
        """
        chosen = list(names) if names else self.projection_names()
        for name in chosen:
            self.projector.runner(name)
        with TELEMETRY.span(REBUILD_SPAN, **{PROJECTION: chosen}) as span:
            return self._rebuild_blue_green(
                chosen,
                TELEMETRY.progress(span, progress),
                processes,
                {"accept": accept, "drop_old": drop_old, "restart": restart, "compare": compare},
            )

    def _rebuild_blue_green(
        self,
        chosen: list[str],
        progress: Progress | None,
        processes: int,
        options: dict[str, bool],
    ) -> list[BuildOutcome]:
        workers = min(len(chosen), processes)
        if workers <= 1 or self.backend == "memory":
            with self.projector.paused():
                return self.builds.rebuild(
                    chosen,
                    accept=options["accept"],
                    drop_old=options["drop_old"],
                    restart=options["restart"],
                    progress=progress,
                    compare=options["compare"],
                )
        with self.projector.paused():
            try:
                projections = [self.projector.runner(name).projection for name in chosen]
                reported = rebuild_in_processes(
                    rebuild_group, self.url, split(projections, workers), progress, options
                )
            finally:
                # Even a failed rebuild moved the views: take their slots, positions, stalls.
                self.projector.reload(chosen)
        outcomes = [BuildOutcome.from_json(item) for item in reported]
        return sorted(outcomes, key=lambda outcome: chosen.index(outcome.name))

    def verify_projections(
        self, names: Sequence[str] | None = None, *, progress: Progress | None = None
    ) -> list[VerifyOutcome]:
        """Compare each projection's live slot with a scratch replay at its position."""
        chosen = list(names) if names else self.projection_names()
        for name in chosen:
            self.projector.runner(name)
        with TELEMETRY.span(VERIFY_SPAN, **{PROJECTION: chosen}) as span:
            reported = TELEMETRY.progress(span, progress)
            return [self.builds.verify(name, progress=reported) for name in chosen]

    def close(self) -> None:
        """Refuse new calls and wait for running ones, stop the follower, project what it had
        not reached, then close every connection."""
        if self._closed:
            return
        self._closed = True
        TELEMETRY.unwatch(self)
        self._calls.close()
        self._closing.set()
        self._wake.set()
        if self._leadership is not None:
            self._leadership.interrupt()
        if self._follower is not None:
            # No timeout: closing connections under a follower still reading is the crash
            # this order exists to prevent.
            self._follower.join()
            # What the last commands wrote may not have reached the follower before it stopped
            # (where another process leads, that one projects them).
            if self._projects():
                self.catch_up()
        if self._leadership is not None:
            self._leadership.close()
        self.app.close()
        self.builds.close()
        self.views.close()
        self.storage.close()


def resolve_url(url: str | os.PathLike[str] | None, env: Mapping[str, str] | None = None) -> str:
    """The store URL: the given one (a path names a SQLite file), else ``RUNLEDGER_URL``, else
    the embedded default."""
    if url is None or url == "":
        environment = os.environ if env is None else env
        return environment.get(URL_VARIABLE) or DEFAULT_URL
    return store_url(url)


def open_backend(url: str, *, create: bool = True) -> tuple[EventStorage, ViewStore]:
    """The event storage and view store a URL names; tables are created on first use, and
    without ``create`` a store that does not exist is a ``StoreNotFoundError``."""
    if url.startswith(SQLITE_PREFIX):
        from runledger.infrastructure.storage.sqlite import SQLiteStorage
        from runledger.infrastructure.views.sqlite import SQLiteViewStore

        path = sqlite_path(url, create=create)
        try:
            storage = SQLiteStorage(path)
        except sqlite3.DatabaseError as error:
            # A busy or locked file is the storage's to report; any other refusal of the
            # file means it is not a database runledger can use.
            if isinstance(error, sqlite3.OperationalError):
                raise
            raise InvalidStorePathError(
                url=redact_url(url), reason=f"the file is not a SQLite database ({error})"
            ) from error
        return storage, SQLiteViewStore(path)
    if url.startswith(("postgresql://", "postgres://")):
        from runledger.infrastructure.storage.postgres import PostgresStorage
        from runledger.infrastructure.views.postgres import PostgresViewStore

        postgres = PostgresStorage(url, create=create)
        return postgres, PostgresViewStore(postgres.datastore)
    if url == "memory://":
        from runledger.infrastructure.storage.memory import MemoryStorage
        from runledger.infrastructure.views.memory import MemoryViewStore

        return MemoryStorage(), MemoryViewStore()
    raise InvalidStoreUrlError(redact_url(url))


def open_runtime(
    url: str | os.PathLike[str] | None = None,
    *,
    clock: Clock = utc_now,
    allow_host_session_recording: bool = False,
    env: Mapping[str, str] | None = None,
    embedded_projections: bool = True,
    projections: Sequence[str] | None = None,
    create: bool = True,
) -> StoreRuntime:
    """Open the runtime at ``url``; ``open_store`` takes the same arguments (see there)."""
    resolved = resolve_url(url, env)
    storage, views = open_backend(resolved, create=create)
    return StoreRuntime(
        storage,
        views,
        url=resolved,
        clock=clock,
        allow_host_session_recording=allow_host_session_recording,
        embedded_projections=embedded_projections,
        projections=projections,
    )


def rebuild_group(url: str, names: list[str], messages: Any, options: dict[str, Any]) -> None:
    """Rebuild ``names`` in this (spawned) process, reporting on ``messages``."""
    die_with_parent()
    try:
        with open_runtime(url, embedded_projections=False, projections=names) as runtime:
            outcomes = runtime.rebuild_blue_green(
                names, progress=lambda n: messages.put(("page", n)), **options
            )
        messages.put(("done", [outcome.as_json() for outcome in outcomes]))
    except BaseException as error:
        kind = "corrupt" if isinstance(error, CorruptEventError) else "error"
        messages.put((kind, f"{type(error).__name__}: {error}"))
        raise


__all__: Sequence[str] = [
    "ClosedOnExit",
    "StoreRuntime",
    "default_projections",
    "open_backend",
    "open_runtime",
    "resolve_url",
]
