"""The projection worker (``runledger projections run``) as operators run it.

Workers run as real subprocesses (``python -m infrastructure.cli projections run``) on a SQLite
file or a fresh PostgreSQL database, while this test process appends through
``open_runtime(url, embedded_projections=False)``, so the only projector at work is the
worker. Read models are read through a store opened the same way: queries return exactly what
the worker committed.

The big log (twelve runs, about 19,000 events) is played once per module through the domain
API on a memory store, then copied event by event (same topics, states and order) into each
test's database: well under a second, where replaying the commands on a durable store takes
half a minute.

Every wait is bounded by time and fails with what it last saw; every subprocess is killed in
``finally`` if a test leaves it running.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlsplit

import orjson
import pytest
from eventsourcing.persistence import StoredEvent

from runledger.domain.ids import follow_up_message_id
from runledger.domain.ports import LogEntry
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime, default_projections, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.listener import Listener
from runledger.infrastructure.views.worker import ProjectionWorker
from runledger.projections.base import Projection, Table
from runledger.projections.events import projected
from tests.support.postgres import PostgresServer

REPO_ROOT = Path(__file__).resolve().parents[2]
PROJECTION_NAMES = frozenset(
    {"follow_up_queue", "terminal_data", "viewer_deltas", "session_outbox", "settings", "runs"}
)
SOURCE = "workflow-tool"
STARTUP_SECONDS = 20.0
"""Bound on a worker subprocess starting and committing its first page."""
CATCH_UP_SECONDS = 30.0
"""Bound on a worker catching up with a log of this module."""
STOP_SECONDS = 5.0
"""A signalled worker must have exited within this many seconds."""
SIGNAL_AFTER = 1500
"""Signal a catching-up worker once every projection passed this position (a few pages)."""
SIGNAL_RUNS = {"sqlite": 12, "postgresql": 4}
"""Runs of the big log a signalled worker catches up with (PostgreSQL pages are slower)."""
BIG_LOG_RUNS = 12
BIG_LOG_FOLLOW_UPS = 400
RACE_RUNS = {"sqlite": 4, "postgresql": 1}
"""Runs of the big log two workers race over, by backend (PostgreSQL pages are slower)."""

T = TypeVar("T")

SQLITE = pytest.param("sqlite", id="sqlite")
POSTGRES = pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres)


# -- the log ------------------------------------------------------------------------------


def play_run(store: WorkflowStore, index: int, *, follow_ups: int) -> str:
    """One run's life through the public commands; returns the run id.

    The run is bound to one of three shared sessions (so outbox order interleaves runs),
    queues ``follow_ups`` follow-ups, delivers three, removes two, and ends: odd runs fail
    (cancelling what is still queued), even runs complete.
    """
    run_id = f"run-{index}"
    session = f"session-{index % 3}"
    actor = Actor("session", session)
    store.create_run(run_id, workflow_name="echo", input={"index": index})
    store.bind_origin_session(run_id, session)
    store.record_progress(run_id, status="running", current_node="hold")
    store.set_presentation_instructions(run_id, f"Present run {index} briefly.")
    ids = [
        store.queue_follow_up(
            run_id,
            request_id=f"request-{number}",
            target_session_id=session,
            actor=actor,
            source=SOURCE,
            prompt=f"Task {number} of run {index}",
        ).follow_up.follow_up_id
        for number in range(follow_ups)
    ]
    for follow_up_id in ids[:3]:
        message_id = follow_up_message_id(follow_up_id)
        store.report_branch(
            session, [(message_id, f"entry-{follow_up_id[-12:]}")], allowed_ids=[message_id]
        )
    for follow_up_id in ids[3:5]:
        store.remove_follow_up(run_id, follow_up_id, actor=actor, source=SOURCE)
    if index % 2:
        store.finish_run(run_id, status="failed", error=f"boom {index}")
    else:
        store.finish_run(run_id, status="completed", final_output={"answer": index})
    return run_id


@dataclass(frozen=True)
class BigLog:
    """A log played through the domain: its events and where each run's events end."""

    events: list[StoredEvent]
    run_ends: list[int]

    def runs(self, count: int) -> list[StoredEvent]:
        """The events of the first ``count`` runs."""
        return self.events[: self.run_ends[count - 1]]


@pytest.fixture(scope="module")
def big_log() -> BigLog:
    events: list[StoredEvent] = []
    run_ends: list[int] = []
    with open_runtime("memory://", embedded_projections=False) as runtime:
        store = WorkflowStore(runtime)
        for index in range(BIG_LOG_RUNS):
            play_run(store, index, follow_ups=BIG_LOG_FOLLOW_UPS)
            run_ends.append(runtime.storage.max_position())
        for entry in runtime.storage.read_log(after=0, limit=10**9):
            events.append(
                StoredEvent(entry.originator_id, entry.originator_version, entry.topic, entry.state)
            )
    assert len(events) == run_ends[-1] >= 15_000
    return BigLog(events, run_ends)


def append_events(
    runtime: StoreRuntime, events: Sequence[StoredEvent], *, batch: int = 1000
) -> None:
    """Append already-recorded events in order, ``batch`` per transaction."""
    for start in range(0, len(events), batch):
        runtime.storage.events.insert_events(list(events[start : start + batch]))


# -- stores, views and comparisons ----------------------------------------------------------


@pytest.fixture(params=[SQLITE, POSTGRES])
def worker_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store on a SQLite file or a fresh PostgreSQL database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'worker.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


@contextmanager
def observer(url: str) -> Iterator[StoreRuntime]:
    """A runtime that never projects: it reads what workers committed (and may append)."""
    with open_runtime(url, embedded_projections=False) as runtime:
        yield runtime


def canonical(row: dict[str, Any]) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SORT_KEYS)


def dump_views(runtime: StoreRuntime) -> dict[str, list[bytes]]:
    """Every row of every projection table, decoded and in a canonical order."""
    reader = runtime.views.reader()
    return {
        table.name: sorted(canonical(row) for row in reader.scan(table))
        for projection in default_projections()
        for table in projection.tables
    }


class EncodedView:
    """An independent in-memory ViewWriter that keeps rows as JSON, as a database would.

    ``tests.support.fake_view.FakeView`` deep-copies rows on every get and put, which is
    quadratic for the viewer-deltas run row of a run with hundreds of follow-ups; JSON text
    gives the same isolation (no caller can mutate a stored row) at orjson speed.
    """

    def __init__(self) -> None:
        self.tables: dict[str, dict[tuple[Any, ...], bytes]] = {}

    def get(self, table: Table, key: tuple[Any, ...]) -> dict[str, Any] | None:
        row = self.tables.get(table.name, {}).get(tuple(key))
        return None if row is None else dict(orjson.loads(row))

    def put(self, table: Table, row: dict[str, Any]) -> None:
        assert set(row) == set(table.column_names), (table.name, sorted(row))
        self.tables.setdefault(table.name, {})[table.key_of(row)] = canonical(row)

    def delete(self, table: Table, key: tuple[Any, ...]) -> None:
        self.tables.get(table.name, {}).pop(tuple(key), None)


def fresh_projection(
    projection: Projection, entries: Sequence[LogEntry], up_to: int
) -> dict[str, list[bytes]]:
    """The projection's tables after applying the log up to ``up_to`` from scratch, in memory:
    table name -> canonical rows."""
    view = EncodedView()
    for entry in entries:
        if entry.position > up_to:
            break
        event = projected(entry)
        if event.wire_name in projection.topics:
            projection.apply(event, view)
    return {
        table.name: sorted(view.tables.get(table.name, {}).values()) for table in projection.tables
    }


def first_difference(actual: list[bytes], expected: list[bytes]) -> str:
    missing = sorted(set(expected) - set(actual))
    extra = sorted(set(actual) - set(expected))
    return (
        f"{len(actual)} rows, expected {len(expected)}; "
        f"first missing: {missing[:1]!r}; first unexpected: {extra[:1]!r}"
    )


def assert_views_match_log(runtime: StoreRuntime) -> dict[str, int]:
    """Each projection's rows equal a fresh projection of the log up to its tracked position.

    Returns the tracked positions.
    """
    positions = {state.name: state.position for state in runtime.views.tracking()}
    assert set(positions) >= PROJECTION_NAMES, positions
    entries = runtime.storage.read_log(after=0, limit=10**9)
    known_positions = {entry.position for entry in entries}
    views = dump_views(runtime)
    for projection in default_projections():
        name = projection.name
        position = positions[name]
        assert position == 0 or position in known_positions, (
            f"{name} tracks position {position}, which no event of the log has"
        )
        expected = fresh_projection(projection, entries, position)
        for table_name, rows in expected.items():
            assert views[table_name] == rows, (
                f"{name} at position {position}, table {table_name}: "
                + first_difference(views[table_name], rows)
            )
    return positions


def is_caught_up(runtime: StoreRuntime) -> bool:
    head = runtime.storage.max_position()
    statuses = runtime.projection_status()
    return (
        {status.name for status in statuses} == PROJECTION_NAMES
        and all(status.lag == 0 and status.position == head for status in statuses)
        and all(status.last_error is None for status in statuses)
    )


def describe_status(runtime: StoreRuntime) -> str:
    head = runtime.storage.max_position()
    statuses = ", ".join(
        f"{status.name}@{status.position} lag {status.lag}"
        + (f" error {status.last_error!r}" if status.last_error else "")
        for status in runtime.projection_status()
    )
    return f"head {head}: {statuses}"


def min_position(runtime: StoreRuntime) -> int:
    states = [state for state in runtime.views.tracking() if state.name in PROJECTION_NAMES]
    complete = len(states) == len(PROJECTION_NAMES)
    return min((state.position for state in states), default=0) if complete else 0


# -- worker subprocesses ------------------------------------------------------------------


@dataclass
class WorkerProcess:
    process: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path

    def output(self) -> str:
        return (
            f"exit code {self.process.poll()}\n"
            f"--- stdout\n{self.stdout.read_text(errors='replace')}"
            f"--- stderr\n{self.stderr.read_text(errors='replace')}"
        )

    def started(self) -> bool:
        """Whether it announced itself (it does once its signal handlers are installed)."""
        return "projection worker following" in self.stdout.read_text()

    def stop(self, sig: signal.Signals = signal.SIGTERM, *, within: float = STOP_SECONDS) -> float:
        """Send ``sig``; assert a clean exit within ``within`` seconds; returns seconds taken."""
        started = time.monotonic()
        self.process.send_signal(sig)
        try:
            code = self.process.wait(timeout=within)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker still running {within}s after {sig.name}\n{self.output()}")
        took = time.monotonic() - started
        assert code == 0, f"worker exited with {code} after {sig.name}\n{self.output()}"
        assert "projection worker stopped" in self.stdout.read_text(), self.output()
        return took


@contextmanager
def running_workers(
    url: str, directory: Path, *, count: int = 1, poll: float = 0.2
) -> Iterator[list[WorkerProcess]]:
    """``count`` started ``runledger projections run`` subprocesses on ``url``, killed at exit."""
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["PYTHONUNBUFFERED"] = "1"
    workers: list[WorkerProcess] = []
    try:
        for number in range(count):
            tag = f"{len(list(directory.glob('worker-*.out')))}-{number}"
            stdout, stderr = directory / f"worker-{tag}.out", directory / f"worker-{tag}.err"
            with stdout.open("wb") as out, stderr.open("wb") as err:
                process = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "runledger.infrastructure.cli",
                        "projections",
                        "run",
                        "--url",
                        url,
                        "--poll",
                        str(poll),
                    ],
                    cwd=directory,
                    env=env,
                    stdout=out,
                    stderr=err,
                )
            workers.append(WorkerProcess(process, stdout, stderr))
        for worker in workers:
            wait_for(
                worker.started,
                timeout=STARTUP_SECONDS,
                what="the worker to start",
                workers=[worker],
            )
        yield workers
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait(timeout=10)


def wait_for(
    condition: Callable[[], T],
    *,
    timeout: float,
    what: str,
    describe: Callable[[], str] | None = None,
    workers: Sequence[WorkerProcess] = (),
    interval: float = 0.02,
) -> T:
    """Poll ``condition`` until truthy; fail clearly on timeout or if a worker died."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        for worker in workers:
            if worker.process.poll() is not None:
                pytest.fail(f"worker exited while waiting for {what}\n{worker.output()}")
        if time.monotonic() > deadline:
            seen = f" (last seen: {describe()})" if describe is not None else ""
            outputs = "\n".join(worker.output() for worker in workers)
            pytest.fail(f"timed out after {timeout}s waiting for {what}{seen}\n{outputs}")
        time.sleep(interval)


def wait_caught_up(
    runtime: StoreRuntime, *, timeout: float, workers: Sequence[WorkerProcess] = ()
) -> float:
    """Wait until every projection is at the head of the log; returns seconds waited."""
    started = time.monotonic()
    wait_for(
        lambda: is_caught_up(runtime),
        timeout=timeout,
        what="every projection to reach the head of the log",
        describe=lambda: describe_status(runtime),
        workers=workers,
    )
    return time.monotonic() - started


# -- PostgreSQL helpers -------------------------------------------------------------------


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def listening_backends(server: PostgresServer, url: str) -> list[int]:
    """Pids of the backends that LISTEN on ``url``'s database."""
    rows = server.connection.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND query LIKE 'LISTEN%%'",
        (database_of(url),),
    ).fetchall()
    return [int(str(pid)) for (pid,) in rows]


# -- 1. a worker follows appends of another process ------------------------------------------


def test_a_worker_keeps_the_read_models_current_while_another_process_appends(
    worker_url: str, tmp_path: Path
) -> None:
    with observer(worker_url) as runtime, running_workers(worker_url, tmp_path) as workers:
        store = WorkflowStore(runtime)
        wait_caught_up(runtime, timeout=STARTUP_SECONDS, workers=workers)
        for index in range(2):
            # The worker has already caught up with an earlier run: it follows, it does not
            # just catch up once.
            run_id = play_run(store, index, follow_ups=6)
            assert runtime.storage.max_position() > 0
            wait_caught_up(runtime, timeout=10.0, workers=workers)

            queue = store.follow_up_queue(run_id)
            assert queue is not None
            assert queue.origin_session_id == f"session-{index % 3}"
            assert [item.request_id for item in queue.follow_ups] == [
                f"request-{number}" for number in range(6)
            ]
            assert [item.delivery for item in queue.follow_ups[:3]] == ["sent"] * 3
            assert [item.state for item in queue.follow_ups[3:5]] == ["removed"] * 2
            terminal = store.terminal_data(run_id)
            assert terminal is not None
            if index % 2:
                assert (terminal.status, terminal.error) == ("failed", f"boom {index}")
                assert queue.follow_ups[5].state == "cancelled"
            else:
                assert (terminal.status, terminal.final_output) == ("completed", {"answer": 0})
                assert queue.follow_ups[5].state == "queued"
            assert terminal.presentation_instructions == f"Present run {index} briefly."
            outbox = store.session_outbox(f"session-{index % 3}")
            assert {message.run_id for message in outbox} == {run_id}
            assert [message.status for message in outbox[:3]] == ["sent"] * 3
            deltas = store.viewer_deltas(run_id, after_revision=0)
            assert deltas.current_revision > 1
        workers[0].stop()


# -- 2. polling recovers a dropped notification; notifications beat the poll ------------------


class _DeafListener:
    """A listener that never hears a notification: every wake-up must come from polling."""

    def __init__(self, stopping: threading.Event) -> None:
        self.stopping = stopping
        self.waits = 0

    def wait(self, timeout: float, *_: object) -> bool:
        self.waits += 1
        self.stopping.wait(timeout)
        return False

    def interrupt(self) -> None:
        """Nothing to end: its waits sleep on ``stopping`` itself."""

    def release(self) -> None:
        pass


@contextmanager
def worker_in_thread(
    worker: ProjectionWorker, *, join_seconds: float
) -> Iterator[list[BaseException]]:
    """Run ``worker`` in a thread of this process; yields the errors its run raised (for a
    wait to give up on), stops and joins it on exit, and fails if it did not stop or
    failed."""
    errors: list[BaseException] = []

    def run() -> None:
        try:
            worker.run()
        except BaseException as error:
            errors.append(error)

    thread = threading.Thread(target=run, name="projection-worker", daemon=True)
    thread.start()
    try:
        yield errors
    finally:
        worker.stop()
        thread.join(timeout=join_seconds)
    assert not thread.is_alive(), "the worker thread did not stop"
    assert errors == [], f"the worker thread failed: {errors!r}"


@pytest.mark.postgres
@pytest.mark.parametrize("deafness", ["stub-listener", "wrong-channel"])
def test_polling_recovers_a_dropped_notification(postgres_store_url: str, deafness: str) -> None:
    poll = 1.0
    with observer(postgres_store_url) as writer, observer(postgres_store_url) as worker_runtime:
        store = WorkflowStore(writer)
        worker = ProjectionWorker(worker_runtime, poll_seconds=poll)
        assert isinstance(worker._listener, Listener), "a PostgreSQL worker LISTENs"
        worker._listener.release()
        deaf: _DeafListener | None = None
        if deafness == "stub-listener":
            deaf = _DeafListener(worker.stopping)
            worker._listener = deaf  # type: ignore[assignment]
        else:
            worker._listener = Listener(postgres_store_url, "runledger_test_nobody_notifies")

        with worker_in_thread(worker, join_seconds=poll + 5.0) as errors:

            def caught_up(timeout: float) -> float:
                started = time.monotonic()
                wait_for(
                    lambda: errors or is_caught_up(writer),
                    timeout=timeout,
                    what="the worker thread to catch up",
                    describe=lambda: describe_status(writer),
                )
                assert errors == [], f"the worker thread failed: {errors!r}"
                return time.monotonic() - started

            time.sleep(0.3)  # let the worker go to sleep on its (deaf) listener
            latencies = []
            for index in range(2):
                play_run(store, index, follow_ups=2)
                latencies.append(caught_up(poll + 5.0))
                time.sleep(0.2)
            assert all(latency < poll + 1.0 for latency in latencies), (
                f"with notifications lost the worker took {latencies}s (poll {poll}s)"
            )
            if deaf is not None:
                assert deaf.waits >= 2, "the worker never slept on its listener"
            assert store.terminal_data("run-1") is not None


@pytest.mark.postgres
def test_notifications_wake_the_worker_long_before_its_poll_interval(
    postgres_store_url: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    poll = 10.0
    with (
        observer(postgres_store_url) as runtime,
        running_workers(postgres_store_url, tmp_path, poll=poll) as workers,
    ):
        wait_caught_up(runtime, timeout=STARTUP_SECONDS, workers=workers)
        wait_for(
            lambda: listening_backends(postgres_server, postgres_store_url),
            timeout=10.0,
            what="the worker's LISTEN connection",
            workers=workers,
        )
        store = WorkflowStore(runtime)
        latencies = []
        for index in range(3):
            play_run(store, index, follow_ups=2)
            appended = time.monotonic()
            wait_caught_up(runtime, timeout=poll + 5.0, workers=workers)
            latencies.append(time.monotonic() - appended)
            time.sleep(0.3)
        assert max(latencies) < 2.0, f"latencies {latencies}s with a {poll}s poll interval"
        # Stopping an idle PostgreSQL worker is covered (as a known bug) further down.


@pytest.mark.postgres
def test_a_commit_during_the_first_look_at_the_log_wakes_the_worker(
    postgres_store_url: str,
) -> None:
    # CI saw it (2026-12-08): a worker started slowly, the host committed while the worker
    # read the log for the first time, and the worker LISTENed only after that read. Nobody
    # woke it: it slept its whole poll (a minute) on a commit it had not seen.
    poll = 3600.0
    with observer(postgres_store_url) as writer, observer(postgres_store_url) as worker_runtime:
        store = WorkflowStore(writer)
        passes: list[int] = []

        def commit_on_the_first_pass(read: int) -> None:
            if not passes:
                play_run(store, 0, follow_ups=2)
            passes.append(read)

        worker = ProjectionWorker(
            worker_runtime, poll_seconds=poll, on_pass=commit_on_the_first_pass
        )
        with worker_in_thread(worker, join_seconds=STOP_SECONDS) as errors:
            wait_for(
                lambda: errors or (len(passes) > 1 and is_caught_up(writer)),
                timeout=STARTUP_SECONDS,
                what="the worker to project the commit of its first pass",
                describe=lambda: describe_status(writer),
            )
            assert errors == [], f"the worker thread failed: {errors!r}"
            assert store.terminal_data("run-0") is not None


# -- 3. a signal mid-catch-up leaves every view consistent ------------------------------------


@pytest.mark.parametrize(
    ("backend", "sig"),
    [
        pytest.param("sqlite", signal.SIGTERM, id="sqlite-SIGTERM"),
        pytest.param("sqlite", signal.SIGINT, id="sqlite-SIGINT"),
        pytest.param(
            "postgresql", signal.SIGTERM, id="postgresql-SIGTERM", marks=pytest.mark.postgres
        ),
        pytest.param(
            "postgresql", signal.SIGINT, id="postgresql-SIGINT", marks=pytest.mark.postgres
        ),
    ],
)
@pytest.mark.slow
def test_a_signal_while_catching_up_leaves_consistent_views(
    backend: str,
    sig: signal.Signals,
    big_log: BigLog,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'big.db'}"
        if backend == "sqlite"
        else str(request.getfixturevalue("postgres_store_url"))
    )
    with observer(url) as runtime:
        append_events(runtime, big_log.runs(SIGNAL_RUNS[backend]))
        head = runtime.storage.max_position()
        with running_workers(url, tmp_path) as workers:
            before = wait_for(
                lambda: min_position(runtime) >= SIGNAL_AFTER and min_position(runtime),
                timeout=STARTUP_SECONDS,
                what=f"the worker to pass position {SIGNAL_AFTER}",
                describe=lambda: describe_status(runtime),
                workers=workers,
            )
            assert before < head, f"the worker caught up ({head} events) before the signal"
            took = workers[0].stop(sig)
        positions = assert_views_match_log(runtime)
        assert all(0 < position < head for position in positions.values()), (
            f"the worker should have stopped mid-log (head {head}): {positions}"
        )
        assert took < STOP_SECONDS

        if (backend, sig) == ("sqlite", signal.SIGTERM):
            # A new worker resumes from the tracked positions and ends at the full log,
            # without applying any page twice (on one case only, to keep the file fast).
            with running_workers(url, tmp_path) as workers:
                wait_caught_up(runtime, timeout=CATCH_UP_SECONDS, workers=workers)
                workers[0].stop()
            assert assert_views_match_log(runtime) == dict.fromkeys(PROJECTION_NAMES, head)


# -- 4. two workers on one database never double-apply ---------------------------------------


def test_two_workers_on_one_database_never_double_apply(
    worker_url: str, big_log: BigLog, tmp_path: Path
) -> None:
    events = big_log.runs(RACE_RUNS[worker_url.split(":", 1)[0]])
    with observer(worker_url) as runtime:
        backlog, batch = len(events) // 3, max(200, len(events) // 8)
        append_events(runtime, events[:backlog])
        with running_workers(worker_url, tmp_path, count=2, poll=0.05) as workers:
            # Both start on a backlog, then race on every batch appended while they run.
            wait_for(
                lambda: min_position(runtime),
                timeout=STARTUP_SECONDS,
                what="a first page",
                workers=workers,
            )
            for start in range(backlog, len(events), batch):
                append_events(runtime, events[start : start + batch])
                time.sleep(0.05)
            wait_caught_up(runtime, timeout=CATCH_UP_SECONDS, workers=workers)
            for worker in workers:
                worker.stop()
        head = runtime.storage.max_position()
        assert head == len(events)
        assert is_caught_up(runtime), describe_status(runtime)
        assert_views_match_log(runtime)
        worked = dump_views(runtime)
        runtime.rebuild_projections()
        rebuilt = dump_views(runtime)
        for table_name, rows in rebuilt.items():
            assert worked[table_name] == rows, (
                f"{table_name} after two workers vs a rebuild: "
                + first_difference(worked[table_name], rows)
            )
        assert sum(len(rows) for rows in rebuilt.values()) > len(events) // 10


# -- 5. losing the LISTEN connection does not stop the worker --------------------------------


@pytest.mark.postgres
def test_the_worker_survives_losing_its_listen_connection(
    postgres_store_url: str, postgres_server: PostgresServer, tmp_path: Path
) -> None:
    poll = 10.0  # long: recovering by polling alone would be too slow for the asserts below
    with (
        observer(postgres_store_url) as runtime,
        running_workers(postgres_store_url, tmp_path, poll=poll) as workers,
    ):
        store = WorkflowStore(runtime)
        wait_caught_up(runtime, timeout=STARTUP_SECONDS, workers=workers)
        [listener] = wait_for(
            lambda: listening_backends(postgres_server, postgres_store_url),
            timeout=10.0,
            what="the worker's LISTEN connection",
            workers=workers,
        )
        play_run(store, 0, follow_ups=2)
        wait_caught_up(runtime, timeout=2.0, workers=workers)

        postgres_server.connection.execute("SELECT pg_terminate_backend(%s)", (listener,))
        wait_for(
            lambda: any(
                pid != listener for pid in listening_backends(postgres_server, postgres_store_url)
            ),
            timeout=5.0,
            what="the worker to LISTEN again on a new connection",
            describe=lambda: str(listening_backends(postgres_server, postgres_store_url)),
            workers=workers,
        )
        for index in (1, 2):
            play_run(store, index, follow_ups=2)
            assert wait_caught_up(runtime, timeout=5.0, workers=workers) < 2.0
        assert workers[0].process.poll() is None
        assert store.terminal_data("run-2") is not None
        assert "Traceback" not in workers[0].stderr.read_text(), workers[0].output()


# -- stopping an idle worker ---------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=lambda sig: sig.name)
@pytest.mark.parametrize("backend", [SQLITE, POSTGRES])
def test_an_idle_worker_stops_promptly_on_a_signal_even_with_a_long_poll(
    backend: str, sig: signal.Signals, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'idle.db'}"
        if backend == "sqlite"
        else str(request.getfixturevalue("postgres_store_url"))
    )
    with observer(url) as runtime, running_workers(url, tmp_path, poll=10.0) as workers:
        wait_caught_up(runtime, timeout=STARTUP_SECONDS, workers=workers)
        if backend == "postgresql":
            server: PostgresServer = request.getfixturevalue("postgres_server")
            wait_for(
                lambda: listening_backends(server, url),
                timeout=10.0,
                what="the worker's LISTEN connection",
                workers=workers,
            )
        time.sleep(0.5)  # asleep in its poll (or LISTEN) wait
        assert workers[0].stop(sig, within=2.0) < 2.0
