"""``runledger bench``: our operations measured next to raw baselines, in one run.

Every measurement runs in a scratch database of its own on the chosen backend (a new SQLite
file in a temporary folder, or a new PostgreSQL database on the given server, dropped at the
end), and its baseline is plain sqlite3/psycopg work on that same database with the same
durability settings, measured in the same run. Ratios are what count; machines are noisy.
The command rows (P1, P2, P2b) report three baselines each: ``raw`` (a single-row commit),
``ideal`` (a hand-written transaction of the same rows) and ``library`` (the eventsourcing
library's plain ``Application``), see ``baselines``.

Rows measured by other modules join through ``Bench(extra_rows=...)``: a sequence of
``(id, measure)`` pairs, where ``measure(bench)`` returns the row's ``BenchResult`` (or None
when the row does not apply to ``bench.backend``) and may use ``bench.scratch.new_url()``,
``bench.seconds``, ``bench.events``, ``bench.quick`` and ``bench.full`` (``--full``: a row
with a size of its own runs it at full size only then, and names its size in its ``name``).
An extra row whose id is a built-in one replaces it. ``runledger bench`` passes
``extra_rows.EXTRA_ROWS``, the one list to extend.
"""

from __future__ import annotations

import gc
import itertools
import logging
import os
import random
import secrets
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Final
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import orjson
import psycopg
from eventsourcing.persistence import StoredEvent
from psycopg.sql import SQL, Identifier

from runledger.domain.errors import UnsupportedBenchUrlError
from runledger.domain.records import ViewerDeltas
from runledger.domain.values import Actor
from runledger.infrastructure.cli.bench.baselines import (
    IdealCommand,
    LibraryBaseline,
    StartLine,
    at_once,
    in_processes,
    payload_bytes,
    plain_connection,
    server_connection,
)
from runledger.infrastructure.cli.bench.cpu_gaps import spaced
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.storage.urls import read_postgres_url, redact_url
from runledger.infrastructure.store import WorkflowStore, open_store
from runledger.infrastructure.views.rebuild import default_processes
from runledger.projections.base import Table
from runledger.projections.viewer_deltas import ViewerDeltasProjection

REPLICA_PARAMETERS: Final = frozenset({"replica_url", "replica_wait"})

PAYLOAD: Final = os.urandom(600)
"""A raw row about the size of one queued follow-up's three events."""

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BenchResult:
    """One measurement next to its baseline, and whether it met its goal."""

    id: str
    name: str
    value: float
    unit: str
    baseline: float | None
    ratio: float | None
    goal: str
    met: bool
    baselines: Mapping[str, float] = field(default_factory=dict)
    """Every baseline measured for the row, by kind (``raw``, ``ideal``, ``library``, ...);
    ``baseline`` is the one its goal is about. A row made with ``baseline`` alone reports it
    as its ``raw`` baseline."""
    seconds: float | None = None
    """How long the row took, its setup and baselines included (``Bench.run`` sets it): where
    the bench's own time goes, which its goal of five minutes a backend is about. Rows
    measured together (A1 and A2) show it on the first of them."""

    def all_baselines(self) -> dict[str, float]:
        """``baselines``, or ``baseline`` as the raw one."""
        if self.baselines:
            return dict(self.baselines)
        return {} if self.baseline is None else {"raw": self.baseline}

    def as_json(self) -> dict[str, Any]:
        """The result as a JSON object: one key per field, and ``ratios`` beside
        ``baselines`` (the value divided by each)."""
        document = asdict(self)
        baselines = self.all_baselines()
        document["baselines"] = baselines
        document["ratios"] = {
            kind: self.value / baseline for kind, baseline in baselines.items() if baseline
        }
        return document


RowMeasure = Callable[["Bench"], BenchResult | None]
"""A bench row measured outside this module (see the module docstring)."""


TURNS: Final = 3
"""Rows measured in turns with their baselines (A, B, A, B, ...) run this many of each."""


def matched_turns(
    values: Sequence[float], baselines: Mapping[str, Sequence[float]]
) -> tuple[float, dict[str, float]]:
    """The median of a row's per-turn ``values``, and each baseline kind as that median
    divided by the median of the per-turn ratios (value of turn i over baseline of turn i).

    Turn i of the row and of its baselines ran back to back, so a change in the machine's
    load meets both; the ratio of matched turns is what stays. Reporting the baseline this
    way keeps ``ratio == value / baseline`` and makes that ratio the median matched one."""
    value = statistics.median(values)
    matched = {}
    for kind, samples in baselines.items():
        ratio = statistics.median(
            mine / theirs for mine, theirs in zip(values, samples, strict=True) if theirs
        )
        matched[kind] = value / ratio
    return value, matched


def _turns_summary(errors: int, summaries: Sequence[str]) -> str:
    """One summary of several turns of ``_four_writers``: every turn's errors counted, the
    first turn that met one (else the last) for the rest."""
    first_error = next((text for text in summaries if not text.startswith("0 errors")), "")
    summary = first_error or summaries[-1]
    return f"{errors} errors" + summary[summary.index(" errors") + len(" errors") :]


def _counted_rate(
    command: Callable[[int], object], seconds: float, *, first: int = 0
) -> tuple[float, int]:
    """Runs of ``command(n)``, numbered from ``first``, per second for ``seconds``, and how
    many ran."""
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        command(first + count)
        count += 1
    return count / (time.perf_counter() - started), count


def _timed_rate(
    command: Callable[[int], object], seconds: float, *, first: int = 0
) -> tuple[float, int, float]:
    """``_counted_rate``, and the processor time this process spent on each run (the
    client's: a PostgreSQL server's is its own process's)."""
    started = time.process_time()
    rate, count = _counted_rate(command, seconds, first=first)
    return rate, count, (time.process_time() - started) / max(count, 1)


def _spaced_note(rate: float, spaced: float, processor: Sequence[float]) -> str:
    """How the row compares with its baseline run with the row's processor time before
    each commit (``cpu_gaps``)."""
    return (
        f"{rate / spaced:.2f} x it with this command's {statistics.median(processor) * 1000:.2f} "
        "ms of processor time spent before each commit"
    )


def percentile(samples: list[float], fraction: float) -> float:
    """The sample at ``fraction`` of the sorted samples (nearest rank)."""
    ordered = sorted(samples)
    index = min(len(ordered) - 1, max(0, round(fraction * (len(ordered) - 1))))
    return ordered[index]


# -- scratch databases ----------------------------------------------------------------------


def bench_backend(url: str) -> str:
    """The backend the bench measures for ``url``: ``sqlite`` or ``postgresql``."""
    if url.startswith("sqlite:///"):
        return "sqlite"
    if url.startswith(("postgresql://", "postgres://")):
        read_postgres_url(url)  # a wrong parameter is refused before the progress bar
        return "postgresql"
    raise UnsupportedBenchUrlError(redact_url(url))


def check_reachable(url: str) -> None:
    """Raise ``StorageUnavailableError`` now if the bench's PostgreSQL server cannot be
    reached (``run_bench`` asks before its progress bar starts, so the failure is one line)."""
    if bench_backend(url) == "postgresql":
        with server_connection(_server_url(url)):
            pass


def _server_url(url: str) -> str:
    """Where the bench reaches the server itself: through a transaction pooler, the URL's
    ``listen_url`` (only row X1 measures the pooler)."""
    settings = read_postgres_url(url)
    if settings.transaction_pooled and settings.listen_url is not None:
        return settings.listen_url
    return url


class Scratch:
    """Fresh, isolated databases on one backend, removed when the bench ends."""

    def __init__(self, url: str) -> None:
        self.backend = bench_backend(url)
        self.url = url
        self.pooled_url: str | None = None
        """The bench URL when it goes through a transaction pooler (row X1 only); the other
        rows then measure the server itself, at the URL's ``listen_url``."""
        if self.backend == "postgresql":
            server = _server_url(url)
            if server != url:
                self.pooled_url, self.url = url, server
        self._folder = tempfile.TemporaryDirectory(prefix="runledger-bench-")
        self._databases: list[str] = []

    def new_url(self) -> str:
        """The URL of a new, empty database on the backend."""
        if self.backend == "sqlite":
            path = Path(self._folder.name) / f"bench-{len(self._databases)}.db"
            self._databases.append(str(path))
            return f"sqlite:///{path}"
        name = f"runledger_bench_{os.getpid()}_{secrets.token_hex(4)}"
        # Named before it is made: an interrupt during CREATE DATABASE may leave it made.
        self._databases.append(name)
        with server_connection(self.url) as admin:
            admin.execute(SQL("CREATE DATABASE {}").format(Identifier(name)))
        parts = urlsplit(self.url)
        # Replicas name the bench URL's database, not this one: only row X2 reads them.
        query = urlencode(
            [
                (key, value)
                for key, value in parse_qsl(parts.query, keep_blank_values=True)
                if key not in REPLICA_PARAMETERS
            ]
        )
        return urlunsplit(parts._replace(path=f"/{name}", query=query))

    def close(self) -> None:
        """Drop every database made here, and the temporary folder.

        ``WITH (FORCE)`` ends the sessions still connected (a worker or pool that outlived
        its row) and keeps new ones out while the database goes. A database that still cannot
        be dropped is named in a warning, and the others are dropped all the same."""
        try:
            if self.backend == "postgresql" and self._databases:
                self._drop_databases()
        finally:
            self._folder.cleanup()

    def _drop_databases(self) -> None:
        left: list[str] = []
        with server_connection(self.url) as admin:
            for name in self._databases:
                try:
                    admin.execute(
                        SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(Identifier(name))
                    )
                except psycopg.Error as error:
                    left.append(f"{name} ({type(error).__name__})")
        self._databases.clear()
        if left:
            _log.warning("bench databases left on the server: %s", ", ".join(left))


# -- raw baselines ---------------------------------------------------------------------------


class Raw:
    """Plain sqlite3/psycopg on the same database, with the event store's durability."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite:///")
        self.marker = "?" if self.sqlite else "%s"

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A plain connection to the database, with the baseline table made."""
        # The event store keeps SQLite's default, synchronous=FULL: a commit is on disk.
        with plain_connection(self.url) as connection:
            columns = (
                "id INTEGER PRIMARY KEY, payload BLOB"
                if self.sqlite
                else "id BIGSERIAL PRIMARY KEY, payload BYTEA"
            )
            connection.execute(f"CREATE TABLE IF NOT EXISTS bench_raw ({columns})")
            yield connection

    def insert_rate(self, seconds: float) -> float:
        """Single-row inserts, each committed on its own, per second."""
        with self.connection() as connection:
            count = 0
            started = time.perf_counter()
            while time.perf_counter() - started < seconds:
                connection.execute(
                    f"INSERT INTO bench_raw (payload) VALUES ({self.marker})", (PAYLOAD,)
                )
                count += 1
            return count / (time.perf_counter() - started)

    def insert_select_latencies(self, count: int) -> list[float]:
        """Milliseconds to commit one row and read it back."""
        marker = self.marker
        samples = []
        with self.connection() as connection:
            for _ in range(count):
                started = time.perf_counter()
                cursor = connection.execute(
                    f"INSERT INTO bench_raw (payload) VALUES ({marker}) RETURNING id", (PAYLOAD,)
                )
                (row_id,) = cursor.fetchone()
                connection.execute(
                    f"SELECT payload FROM bench_raw WHERE id = {marker}", (row_id,)
                ).fetchone()
                samples.append((time.perf_counter() - started) * 1000)
        return samples

    def read_rate(self) -> float:
        """Stored events read back with a plain SELECT, per second."""
        with self.connection() as connection:
            started = time.perf_counter()
            cursor = connection.execute(
                "SELECT position, topic, state FROM runledger_events ORDER BY position"
            )
            rows = 0
            while batch := cursor.fetchmany(10_000):
                rows += len(batch)
            return rows / (time.perf_counter() - started)

    def range_latencies(self, run_id: str, total: int, count: int, seed: int = 3) -> list[float]:
        """Milliseconds for a plain indexed page of 256 follow-up rows."""
        import random

        marker = self.marker
        picker = random.Random(seed)  # noqa: S311 - reproducible sampling
        statement = (
            "SELECT * FROM rl_fuq_follow_ups WHERE run_id = {m} AND order_number > {m} "
            "ORDER BY order_number LIMIT 256"
        ).replace("{m}", marker)
        samples = []
        with self.connection() as connection:
            for _ in range(count):
                start = picker.randrange(0, max(1, total - 256))
                started = time.perf_counter()
                connection.execute(statement, (run_id, start)).fetchall()
                samples.append((time.perf_counter() - started) * 1000)
        return samples

    def query_latencies(self, statement: str, params: Sequence[tuple[Any, ...]]) -> list[float]:
        """Milliseconds for each run of one plain statement (``{m}`` marks a parameter)."""
        query = statement.replace("{m}", self.marker)
        samples = []
        with self.connection() as connection:
            for values in params:
                started = time.perf_counter()
                connection.execute(query, values).fetchall()
                samples.append((time.perf_counter() - started) * 1000)
        return samples


def _in_batches(events: list[StoredEvent], size: int = 5000) -> Iterator[list[StoredEvent]]:
    """``events`` in slices of ``size``; once consumed, nothing holds the list any more
    (300k event objects alive would make the garbage collection of later samples slow)."""
    for start in range(0, len(events), size):
        yield events[start : start + size]


def _queue(store: WorkflowStore, run_id: str, session_id: str, number: int) -> None:
    """Queue the session's follow-up ``number`` on the run, as a Pi session would."""
    store.queue_follow_up(
        run_id,
        request_id=f"request-{number}",
        target_session_id=session_id,
        actor=Actor("session", session_id),
        source="pi-session",
        prompt=f"Follow-up {number}: check the edge cases.",
    )


YOUNG_FOLLOW_UPS: Final = range(5, 15)
"""The follow-ups P5 times on each young run (by their index): about its 10th."""


def _timed(command: Callable[[], object]) -> float:
    started = time.perf_counter()
    command()
    return time.perf_counter() - started


def _young_commands(
    store: WorkflowStore, prepare: Callable[[WorkflowStore, str, str], None], first_number: int
) -> Iterator[Callable[[], None]]:
    """P5's early commands: follow-ups ``YOUNG_FOLLOW_UPS`` of one young run after another,
    each run prepared, and given its first follow-ups, untimed when its turn comes."""
    number = first_number
    for run in itertools.count():
        run_id, session_id = f"p5-young-{run}", f"p5-young-{run}-session"
        prepare(store, run_id, session_id)
        for index in range(YOUNG_FOLLOW_UPS.stop):
            command = partial(_queue, store, run_id, session_id, number)
            number += 1
            if index in YOUNG_FOLLOW_UPS:
                yield command
            else:
                command()


# -- session recording and leases (P10, P11) ------------------------------------------------

SESSION_BATCH: Final = 64


def session_records(first_seq: int) -> list[dict[str, Any]]:
    """A batch of durable session event records as a host sends them."""
    return [
        {
            "seq": seq,
            "at": "2026-01-01T00:00:00.000Z",
            "type": "tool_execution_finished",
            "nodeId": "build",
            "attemptId": "attempt-1",
            "payload": {"toolCallId": f"call-{seq}", "output": "ok " * 20},
        }
        for seq in range(first_seq, first_seq + SESSION_BATCH)
    ]


def session_appends(store: WorkflowStore) -> Callable[[int], object]:
    """Bind a run to a session in ``store``; the ``append_session_events`` of batch
    ``n`` (records ``n * SESSION_BATCH + 1`` on): the command P10 measures."""
    store.create_run("p7", workflow_name="bench", input={})
    binding = {
        "schema": "pi-workflows.session-binding.v1",
        "runId": "p7",
        "piSessionId": "p7-session",
        "boundAt": "2026-01-01T00:00:00.000Z",
    }
    store.record_session_binding("p7", binding)
    return lambda batch: store.append_session_events(
        "p7", session_records(batch * SESSION_BATCH + 1)
    )


def raw_batch_insert(raw: Raw, connection: Any) -> Callable[[int], object]:
    """One plain multi-row insert of 64 event-sized rows and its commit: P10's baseline."""
    rows = [orjson.dumps(record) for record in session_records(1)]
    statement = "INSERT INTO bench_raw (payload) VALUES " + ", ".join(
        [f"({raw.marker})"] * SESSION_BATCH
    )

    def insert(_: int) -> None:
        if raw.sqlite:
            connection.execute("BEGIN")
            connection.execute(statement, rows)
            connection.execute("COMMIT")
        else:
            connection.execute(statement, rows)

    return insert


def claim_renew_rate(url: str, seconds: float) -> float:
    """``claim_run`` and ``renew_claim`` commands per second (each claim renewed once)."""
    with open_store(url) as store:
        count = 0
        measured = 0.0
        while measured < seconds:
            run_id = f"p8-{count}"
            store.create_run(run_id, workflow_name="bench", input={})  # setup, not timed
            started = time.perf_counter()
            claim = store.claim_run(run_id, owner_type="controller", owner_id="bench")
            if claim is not None:
                store.renew_claim(claim)
            measured += time.perf_counter() - started
            count += 2
        return count / measured


# -- workers for multi-process measurements --------------------------------------------------


WARM_UP_COMMANDS: Final = 20
"""Commands each of P2's and P2b's writers runs before its measured turn."""


def _warm_up(store: WorkflowStore, run_id: str, session_id: str, first: int) -> None:
    """A writer's untimed commands before its turn, numbered apart from the measured ones
    (from ``first + 9,000,000``): a request id queued again would be adopted, not queued."""
    for number in range(WARM_UP_COMMANDS):
        _queue(store, run_id, session_id, first + 9_000_000 + number)


def _queueing_worker(
    url: str,
    run_id: str,
    session_id: str,
    writer: int,
    seconds: float,
    start: StartLine,
    results: Any,
) -> None:
    errors: list[str] = []
    with open_store(url) as store:
        # Warmed before the clock starts, as a long-running worker is: a turn is a fraction
        # of a second, and a new process's first commands (its pool, its prepared
        # statements, its cache of the run) made P2 count 200/s in turns of 0.67 s against
        # 476/s in turns of 2 s.
        _warm_up(store, run_id, session_id, writer * 10_000_000)
        start.wait()
        count = 0
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            try:
                _queue(store, run_id, session_id, writer * 10_000_000 + count + len(errors))
                count += 1
            # Counted and reported, never hidden: P2b's goal is that there are none.
            except Exception as error:
                errors.append(f"{type(error).__name__}: {error}")
        # Inside the clock: a query brings this process's read models up to the log's end
        # (every writer's commands), so a projection left to the follower thread is paid
        # for here, not hidden as lag when the turn ends.
        try:
            store.follow_up_queue_range(run_id, start=0, limit=1)
        except Exception as error:
            errors.append(f"{type(error).__name__}: {error}")
        results.put((count, time.perf_counter() - began, len(errors), errors[:3]))


def _raw_insert_worker(url: str, seconds: float, start: StartLine, results: Any) -> None:
    raw = Raw(url)
    with raw.connection() as connection:
        start.wait()
        count = 0
        began = time.perf_counter()
        while time.perf_counter() - began < seconds:
            connection.execute(f"INSERT INTO bench_raw (payload) VALUES ({raw.marker})", (PAYLOAD,))
            count += 1
        results.put((count, time.perf_counter() - began))


WORKER_START_SECONDS: Final = 120.0
"""How long P4 waits for its ``projections run`` worker to project a first command."""


def _await_worker(writer: WorkflowStore, reader: WorkflowStore) -> None:
    """Return once a worker process projects a probe command that ``writer`` queues, as
    ``reader`` sees it: the samples begin with the worker running, however long it took to
    start (a fixed two seconds was less than a slow machine's start-up)."""
    writer.create_run("p4-probe", workflow_name="bench", input={"n": 1})
    writer.bind_origin_session("p4-probe", "p4-probe-session")
    _queue(writer, "p4-probe", "p4-probe-session", 0)
    _until_visible(
        reader,
        "p4-probe",
        0,
        seconds=WORKER_START_SECONDS,
        pause=0.01,
        never="the projection worker never projected a command",
    )


def _until_visible(
    reader: WorkflowStore, run_id: str, index: int, *, seconds: float, pause: float, never: str
) -> None:
    """Return once follow-up ``index`` of ``run_id`` shows in ``reader``'s queue, asking
    every ``pause`` seconds; ``TimeoutError(never)`` after ``seconds``. A one-item read of
    exactly that follow-up: the probe costs the same for the first and the 200th."""
    deadline = time.perf_counter() + seconds
    while True:
        page = reader.follow_up_queue_range(run_id, start=index, limit=1)
        if page is not None and page.follow_ups:
            return
        if time.perf_counter() > deadline:
            raise TimeoutError(never)
        time.sleep(pause)


def _parallel(target: Callable[..., None], args: list[tuple[Any, ...]]) -> float:
    """Start one process per args tuple at once; the summed rate of their work."""
    outcomes: list[tuple[int, float]] = at_once(target, args)
    return sum(count for count, _ in outcomes) / max(elapsed for _, elapsed in outcomes)


def _wal_flushes(url: str) -> int | None:
    """The server's WAL flushes so far (all databases: a busy server inflates the count),
    or None on SQLite, whose every commit flushes its own."""
    if url.startswith("sqlite:///"):
        return None
    with plain_connection(url) as connection:
        return int(connection.execute("SELECT wal_sync FROM pg_stat_wal").fetchone()[0])


def stored_bytes(url: str, tables: Sequence[Table]) -> int:
    """The bytes of every row of ``tables``: each stored value's length as text, summed."""
    sqlite = url.startswith("sqlite:///")
    total = 0
    with plain_connection(url) as connection:
        for table in tables:
            lengths = " + ".join(
                f'coalesce(length(CAST("{name}" AS BLOB)), 0)'
                if sqlite
                else f'coalesce(octet_length("{name}"::text), 0)'
                for name in table.column_names
            )
            statement = f'SELECT coalesce(sum({lengths}), 0) FROM "{table.name}"'
            total += int(connection.execute(statement).fetchone()[0])
    return total


# -- the measurements -----------------------------------------------------------------------


class Bench:
    """The measurements P1-P12 on one backend, each in a scratch database of its own."""

    def __init__(
        self,
        url: str,
        *,
        events: int,
        seconds: float,
        advance: Callable[[str], None],
        only: Sequence[str] = (),
        quick: bool = False,
        full: bool = False,
        extra_rows: Sequence[tuple[str, RowMeasure]] = (),
    ) -> None:
        self.only = {item.upper() for item in only}
        self.extra_rows = list(extra_rows)
        self.quick = quick
        self.full = full
        """The full-size workloads (``--full``): the default's are smaller so that the whole
        bench fits in about five minutes a backend on two cores; each row names its size."""
        self.measured: dict[str, BenchResult] = {}
        """The rows measured so far in this run, by id (P2b compares itself with P1)."""
        # Quick runs shrink the fixed workloads (for tests of the bench itself).
        size = "quick" if quick else "full" if full else "default"
        self.samples = {"quick": 30, "default": 200, "full": 200}[size]
        self.history_follow_ups = {"quick": 400, "default": 3_000, "full": 10_000}[size]
        self.range_follow_ups = {"quick": 3_000, "default": 30_000, "full": 100_000}[size]
        self.settings_changes = {"quick": 400, "default": 3_000, "full": 10_000}[size]
        self.listed_runs = {"quick": 3_000, "default": 30_000, "full": 100_000}[size]
        self.scratch = Scratch(url)
        self.events = events
        self.seconds = seconds
        self.advance = advance

    @property
    def backend(self) -> str:
        """The backend measured: ``sqlite`` or ``postgresql``."""
        return self.scratch.backend

    def _prepared_run(self, store: WorkflowStore, run_id: str, session_id: str) -> None:
        store.create_run(run_id, workflow_name="bench", input={"n": 1})
        store.bind_origin_session(run_id, session_id)

    def queueing(self, store: WorkflowStore, prefix: str) -> Callable[[int], None]:
        """A command queueing follow-up ``count``, on a new run every 100 follow-ups."""
        session_id = f"{prefix}-session"

        def queue(count: int) -> None:
            run_id = f"{prefix}-{count // 100}"
            if count % 100 == 0:
                self._prepared_run(store, run_id, session_id)
            _queue(store, run_id, session_id, count)

        return queue

    def _rate(self, command: Callable[[int], object]) -> float:
        """Runs of ``command(count)`` per second, for the bench's measuring time."""
        return _counted_rate(command, self.seconds)[0]

    def _queue_setup(self, run_id: str) -> Callable[[WorkflowStore], None]:
        return partial(self._prepared_run, run_id=run_id, session_id=f"{run_id}-session")

    def ideal_queue(self) -> IdealCommand:
        """The hand-written ideal of one ``queue_follow_up``, on a new scratch database."""
        return IdealCommand.recorded(
            self.scratch.new_url(),
            self._queue_setup("ideal"),
            lambda store, number: _queue(store, "ideal", "ideal-session", number),
        )

    def _command_baselines(
        self, writers: int, *, one_run: bool = False, seconds: float | None = None
    ) -> dict[str, float]:
        """Raw single-row commits, the ideal and the library's ``Application`` from
        ``writers`` processes at once, for ``seconds`` (default the bench's), in new scratch
        databases (P1 measures its own in turns)."""
        seconds = seconds or self.seconds
        raw_url = self.scratch.new_url()
        ideal = self.ideal_queue()
        library = LibraryBaseline(self.scratch.new_url())
        with Raw(raw_url).connection():
            pass
        writes = [
            partial(
                (ideal if one_run else ideal.for_writer(writer)).rate,
                seconds,
                first=writer * 10_000_000,
            )
            for writer in range(writers)
        ]
        return {
            "raw": _parallel(_raw_insert_worker, [(raw_url, seconds)] * writers),
            "ideal": in_processes(writes),
            "library": in_processes([partial(library.prepared().rate, seconds)] * writers),
        }

    def p1_single_writer(self) -> BenchResult:
        """P1: queued follow-ups per second from one writer, projected in-process; the command
        and its baselines run in turns (``TURNS``), so a change in the machine's load meets
        them alike. One baseline is the ideal with the command's own processor time spent
        before each of its commits (``cpu_gaps``)."""
        raw = Raw(self.scratch.new_url())
        ideal_command = self.ideal_queue()
        library_baseline = LibraryBaseline(self.scratch.new_url())
        seconds = self.seconds / TURNS
        rates: dict[str, list[float]] = {
            "p1": [],
            "raw": [],
            "ideal": [],
            "library": [],
            "ideal_spaced": [],
        }
        processor: list[float] = []
        with open_store(self.scratch.new_url()) as store:
            queue = self.queueing(store, "p1")
            queued = 0
            for _ in range(TURNS):
                rate, count, cpu = _timed_rate(queue, seconds, first=queued)
                rates["p1"].append(rate)
                processor.append(cpu)
                queued += count
                rates["raw"].append(raw.insert_rate(seconds))
                turn = len(rates["ideal"]) << 32
                rates["ideal"].append(ideal_command.rate(seconds, first=turn))
                rates["library"].append(library_baseline.rate(seconds))
                rates["ideal_spaced"].append(
                    ideal_command.rate(seconds, first=turn | 1 << 31, gap=cpu)
                )
        rate, baselines = matched_turns(rates.pop("p1"), rates)
        ideal, library = baselines["ideal"], baselines["library"]
        return BenchResult(
            "P1",
            f"queue_follow_up, one writer, read models current after each command "
            f"({rate / library:.2f} x the library's one-event Application; "
            f"{_spaced_note(rate, baselines['ideal_spaced'], processor)})",
            rate,
            "commands/s",
            ideal,
            rate / ideal,
            ">= 0.7 x ideal and >= 1.0 x library",
            rate / ideal >= 0.7 and rate / library >= 1.0,
            baselines,
        )

    def _four_writers(
        self,
        run_ids: Sequence[str],
        *,
        url: str | None = None,
        seconds: float | None = None,
        turn: int = 0,
    ) -> tuple[float, int, str]:
        """Follow-ups per second queued by four processes, the ``n``-th on ``run_ids[n]``
        (each with its read models current), the errors they met, and those as text; on a
        new scratch database with the runs prepared unless ``url`` is given.

        Writers of each ``turn`` on one database number their requests apart: a request id
        queued again is adopted, a read that writes nothing, not the command measured."""
        if url is None:
            url = self.scratch.new_url()
            with open_store(url) as store:
                for run_id in dict.fromkeys(run_ids):
                    self._prepared_run(store, run_id, f"{run_id}-session")
        flushes = _wal_flushes(url)
        outcomes: list[tuple[int, float, int, list[str]]] = at_once(
            _queueing_worker,
            [
                (url, run_id, f"{run_id}-session", writer, seconds or self.seconds)
                for writer, run_id in enumerate(run_ids, start=turn * len(run_ids))
            ],
        )
        rate = sum(outcome[0] for outcome in outcomes) / max(outcome[1] for outcome in outcomes)
        errors = sum(outcome[2] for outcome in outcomes)
        first = [text for outcome in outcomes for text in outcome[3]][:1]
        summary = f"{errors} errors" + (f": {first[0][:200]}" if first else "")
        if flushes is not None:
            commands = max(1, sum(outcome[0] for outcome in outcomes))
            flushed = (_wal_flushes(url) or 0) - flushes
            # The server's own group commit: one WAL flush serves every commit waiting on it.
            summary += f"; {flushed / commands:.2f} WAL flushes per command"
        return rate, errors, summary

    def p2_four_writers(self) -> BenchResult:
        """P2: queued follow-ups per second from four writer processes, each on its own run,
        in turns (``TURNS``) with its baselines: measured once, minutes apart, the ideal
        alone moved 727 -> 1,444/s between two quiet runs."""
        seconds = self.seconds / TURNS
        rates: list[float] = []
        samples: dict[str, list[float]] = {"raw": [], "ideal": [], "library": []}
        errors = 0
        summaries: list[str] = []
        run_ids = [f"p2-{index}" for index in range(4)]
        url = self.scratch.new_url()
        with open_store(url) as store:
            for run_id in run_ids:
                self._prepared_run(store, run_id, f"{run_id}-session")
        for turn in range(TURNS):
            rate, failed, summary = self._four_writers(run_ids, url=url, seconds=seconds, turn=turn)
            rates.append(rate)
            errors += failed
            summaries.append(summary)
            for kind, value in self._command_baselines(4, seconds=seconds).items():
                samples[kind].append(value)
        rate, baselines = matched_turns(rates, samples)
        ideal = baselines["ideal"]
        summary = _turns_summary(errors, summaries)
        return BenchResult(
            "P2",
            f"queue_follow_up, 4 writer processes on their own runs, read models current, "
            f"median of {TURNS} turns each beside its baselines ({summary})",
            rate,
            "commands/s",
            ideal,
            rate / ideal,
            ">= 0.5 x ideal with 4 processes",
            rate / ideal >= 0.5,
            baselines,
        )

    def p2b_one_run(self) -> BenchResult:
        """P2b: queued follow-ups per second from four processes on one run, and the errors,
        in turns (``TURNS``) with its goal's baseline: one writer queueing on the same run
        of the same database, as P1 does."""
        url = self.scratch.new_url()
        with open_store(url) as store:
            self._prepared_run(store, "p2b", "p2b-session")
        seconds = self.seconds / TURNS
        four: list[float] = []
        one: list[float] = []
        errors = 0
        summaries = []
        for turn in range(TURNS):
            # Writer numbers and the single writer's first number keep every request id new.
            rate, failed, summary = self._four_writers(
                ["p2b"] * 4, url=url, seconds=seconds, turn=turn
            )
            four.append(rate)
            errors += failed
            summaries.append(summary)
            with open_store(url) as store:
                first = (100 + turn) * 10_000_000
                # Warmed as each of the four is (its pool, its cache of the run), so that the
                # ratio compares warm processes on both sides.
                _warm_up(store, "p2b", "p2b-session", first)
                queue = partial(_queue, store, "p2b", "p2b-session")
                one.append(_counted_rate(queue, seconds, first=first)[0])
        rate, matched = matched_turns(four, {"p1": one})
        baselines = {**matched, **self._command_baselines(4, one_run=True)}
        summary = _turns_summary(errors, summaries)
        return BenchResult(
            "P2b",
            f"queue_follow_up, 4 processes on one run, read models current, median of {TURNS} "
            f"turns each beside one writer on the same run ({summary})",
            rate,
            "commands/s",
            matched["p1"],
            rate / matched["p1"],
            ">= 0.7 x one writer on the run and zero errors",
            rate / matched["p1"] >= 0.7 and errors == 0,
            baselines,
        )

    def p3_rebuild(self) -> BenchResult:
        """P3: events per second of a full rebuild of every read model, in turns (``TURNS``)
        with its baseline, a plain read of every stored event."""
        url = self.scratch.new_url()
        rates: list[float] = []
        reads: list[float] = []
        with open_runtime(url, embedded_projections=False) as runtime:
            for batch in HistoryGenerator().batches(self.events):
                runtime.storage.events.insert_events(batch)
            for _ in range(TURNS):
                reads.append(Raw(url).read_rate())
                started = time.perf_counter()
                read = runtime.rebuild_projections(processes=default_processes())
                rates.append(read / (time.perf_counter() - started))
        rate, baselines = matched_turns(rates, {"raw": reads})
        goal = 50_000 if self.backend == "sqlite" else 30_000
        return BenchResult(
            "P3",
            f"full rebuild of all read models ({read:,} events; median of {TURNS} turns, "
            f"each after a plain read of the log)",
            rate,
            "events/s",
            baselines["raw"],
            rate / baselines["raw"],
            f">= {goal:,} events/s",
            rate >= goal,
            baselines,
        )

    def _visible_latencies(
        self, writer: WorkflowStore, reader: WorkflowStore, count: int
    ) -> list[float]:
        self._prepared_run(writer, "p4", "p4-session")
        samples = []
        for index in range(count):
            started = time.perf_counter()
            _queue(writer, "p4", "p4-session", index)
            _until_visible(
                reader,
                "p4",
                index,
                seconds=5.0,
                pause=0.0002,
                never="a queued follow-up never became visible",
            )
            samples.append((time.perf_counter() - started) * 1000)
        return samples

    def p4_visibility(self) -> BenchResult:
        """P4: milliseconds from a command to its effect in a query (p99)."""
        url = self.scratch.new_url()
        baseline_samples = Raw(url).insert_select_latencies(self.samples)
        with open_store(url) as store:
            embedded = self._visible_latencies(store, store, self.samples)
        modes = {"embedded": embedded}
        if self.backend == "postgresql":
            modes["worker"] = self._worker_latencies(self.scratch.new_url())
        p99 = max(percentile(samples, 0.99) for samples in modes.values())
        met = all(
            percentile(samples, 0.5) <= 5 and percentile(samples, 0.99) <= 25
            for samples in modes.values()
        )
        detail = "; ".join(
            f"{mode} p50 {percentile(s, 0.5):.1f} / p99 {percentile(s, 0.99):.1f} ms"
            for mode, s in modes.items()
        )
        baseline = percentile(baseline_samples, 0.99)
        return BenchResult(
            "P4",
            f"command -> visible in a query, p99 ({detail})",
            p99,
            "ms",
            baseline,
            p99 / baseline,
            "p50 <= 5 ms and p99 <= 25 ms",
            met,
        )

    def _worker_latencies(self, url: str) -> list[float]:
        import subprocess
        import sys

        with (
            open_store(url, embedded_projections=False) as writer,
            open_store(url, embedded_projections=False) as reader,
        ):
            worker = subprocess.Popen(  # noqa: S603 - our own CLI, fixed arguments
                [
                    sys.executable,
                    "-m",
                    "runledger.infrastructure.cli",
                    "projections",
                    "run",
                    "--url",
                    url,
                    "--poll",
                    "0.5",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            try:
                _await_worker(writer, reader)
                return self._visible_latencies(writer, reader, self.samples)
            finally:
                worker.terminate()
                worker.wait(timeout=30)

    def p5_history_cost(self) -> BenchResult:
        """P5: the cost of a late follow-up on a long-lived run against an early one.

        Measured in pairs once the long run holds all but its last ``window`` follow-ups: a
        command on a young run (its 6th to 15th follow-up, ``YOUNG_FOLLOW_UPS``) and one on
        the long run, side by side, first one then the other. Timed apart, at the start and
        at the end of the history, a machine whose speed drifted over those seconds moved
        the ratio by itself (0.89x to 1.70x for the same code, on one afternoon)."""
        url = self.scratch.new_url()
        total = self.history_follow_ups
        window = min(100, total // 4)
        early: list[float] = []
        late: list[float] = []
        with open_store(url) as store:
            self._prepared_run(store, "p5", "p5-session")
            for index in range(total - window):
                _queue(store, "p5", "p5-session", index)
            young = _young_commands(store, self._prepared_run, total)
            for pair in range(window):
                queue_young = next(young)
                queue_late = partial(_queue, store, "p5", "p5-session", total - window + pair)
                if pair % 2:
                    late.append(_timed(queue_late))
                    early.append(_timed(queue_young))
                else:
                    early.append(_timed(queue_young))
                    late.append(_timed(queue_late))
        ratio = statistics.median(late) / statistics.median(early)
        return BenchResult(
            "P5",
            f"cost of the {total:,}th follow-up on one run vs the 10th "
            f"({statistics.median(late) * 1000:.2f} vs {statistics.median(early) * 1000:.2f} ms,"
            f" medians of {window} pairs)",
            ratio,
            "x",
            None,
            None,
            "<= 1.5 x",
            ratio <= 1.5,
        )

    def p6_range(self) -> BenchResult:
        """P6: milliseconds for a 256-item range of a run's follow-up queue (p99), from a store
        whose read model was built, and from one that projected it live as the history came
        (a host's store with embedded projections: its queries carry the log's probe on
        PostgreSQL, and its tables were written page by page, not loaded by a build)."""
        total = self.range_follow_ups
        run_id = "p6-run-1"
        picker = random.Random(5)  # noqa: S311 - reproducible sampling
        starts = [picker.randrange(0, total - 256) for _ in range(500)]

        def range_at(store: WorkflowStore, start_at: int) -> None:
            page = store.follow_up_queue_range(run_id, start=start_at, limit=256)
            if page is None or len(page.follow_ups) != 256:
                raise AssertionError("range query returned the wrong page")

        url = self.scratch.new_url()
        samples = self._both_stores(
            url,
            lambda: _in_batches(HistoryGenerator(prefix="p6").run_events(total)),
            "follow_up_queue",
            starts,
            range_at,
        )
        baseline = Raw(url).range_latencies(run_id, total, 500)
        name = f"follow_up_queue_range of 256 items on a run with {total:,} follow-ups"
        return self._p99_result("P6", name, samples, baseline)

    @contextmanager
    def _projected_store(self, history: Iterable[list[StoredEvent]]) -> Iterator[WorkflowStore]:
        """A store with embedded projections over a generated history on a new scratch
        database, which it projected live, as a host's store projects the commits it hears of."""
        with open_runtime(self.scratch.new_url()) as runtime:
            for batch in history:
                runtime.storage.events.insert_events(batch)
            runtime.catch_up()
            yield WorkflowStore(runtime)

    @staticmethod
    @contextmanager
    def _generated_store(
        url: str, history: Iterable[list[StoredEvent]], projection: str
    ) -> Iterator[WorkflowStore]:
        """A store over a generated history, with one read model rebuilt from it."""
        with open_runtime(url, embedded_projections=False) as runtime:
            for batch in history:
                runtime.storage.events.insert_events(batch)
            store = WorkflowStore(runtime)
            store.rebuild_projection(projection)
            yield store

    # -- settings and the runs list ---------------------------------------------------------

    SETTINGS_POLICY: Final = {
        "rules": [{"path": "/counter", "permissions": {"human": ["replace"]}}]
    }

    def p12_settings_changes(self) -> BenchResult:
        """P12: change_settings commands/s, and their cost against queue_follow_up's."""
        url = self.scratch.new_url()
        baseline = Raw(url).insert_rate(self.seconds)
        with open_store(url) as store:

            def change(count: int) -> None:
                run_id = f"p12-settings-{count // 100}"
                if count % 100 == 0:
                    store.create_run(run_id, workflow_name="bench", input={"n": 1})
                    store.ensure_settings_scope(
                        run_id, settings={"counter": 0}, policy=self.SETTINGS_POLICY
                    )
                store.change_settings(
                    run_id,
                    f"{run_id}:$root:1",
                    request_id=f"change-{count}",
                    actor=Actor("human", "p12-user"),
                    source="interactive-command",
                    patch=[{"op": "replace", "path": "/counter", "value": count}],
                )

            queue_rate = self._rate(self.queueing(store, "p12-queue"))
            rate = self._rate(change)
        cost = queue_rate / rate
        return BenchResult(
            "P12",
            f"change_settings, one writer ({cost:.2f} x the cost of queue_follow_up at "
            f"{queue_rate:,.0f}/s)",
            rate,
            "commands/s",
            baseline,
            rate / baseline,
            "cost <= 1.5 x queue_follow_up's",
            cost <= 1.5,
        )

    def p7_viewer_bytes(self) -> BenchResult:
        """P7: the bytes the viewer-delta read model stores for the bench history, next to the
        events' own bytes, with the p99 of a page of deltas read from it."""
        url = self.scratch.new_url()
        generator = HistoryGenerator()
        history = generator.batches(self.events)
        picker = random.Random(17)  # noqa: S311 - reproducible sampling
        with self._generated_store(url, history, "viewer_deltas") as store:
            stored = stored_bytes(url, ViewerDeltasProjection.tables)
            runs = [f"bench-run-{picker.randrange(1, generator.runs + 1)}" for _ in range(500)]
            queries = [
                (
                    run_id,
                    picker.randrange(
                        1, store.viewer_deltas(run_id, after_revision=0).current_revision
                    ),
                )
                for run_id in runs
            ]

            def page(query: tuple[str, int]) -> None:
                answer = store.viewer_deltas(query[0], after_revision=query[1])
                if not isinstance(answer, ViewerDeltas) or not answer.deltas:
                    raise AssertionError("viewer_deltas returned no page")

            samples = self._latencies(queries, page)
        events = payload_bytes(url)
        reads = Raw(url).query_latencies(
            "SELECT * FROM rl_vd_revisions WHERE run_id = {m} AND revision > {m} ORDER BY revision",
            queries,
        )
        megabytes = stored / 1e6
        return BenchResult(
            "P7",
            f"viewer-delta bytes for the bench history ({megabytes:,.1f} MB; a page of deltas "
            f"p99 {percentile(samples, 0.99):.2f} ms vs a plain select "
            f"{percentile(reads, 0.99):.2f} ms)",
            stored,
            "bytes",
            events,
            stored / events,
            "<= 20 MB (the events' own bytes as baseline)",
            megabytes <= 20,
        )

    @staticmethod
    def _latencies(queries: Sequence[Any], query: Callable[[Any], None]) -> list[float]:
        """Milliseconds for ``query`` on each of ``queries`` (it checks its own answer)."""
        return [_timed(partial(query, each)) * 1000 for each in queries]

    def _p99_result(
        self,
        key: str,
        name: str,
        samples: list[float] | Mapping[str, list[float]],
        baseline_samples: list[float],
    ) -> BenchResult:
        """The row's p99 against its baseline's; of several stores' ``samples`` (by mode),
        the worst p99, each named."""
        modes = samples if isinstance(samples, Mapping) else {"": samples}
        p99s = {mode: percentile(found, 0.99) for mode, found in modes.items()}
        p99 = max(p99s.values())
        if len(p99s) > 1:
            detail = "; ".join(f"{mode} p99 {each:.2f} ms" for mode, each in p99s.items())
            name = f"{name}, p99 ({detail})"
        else:
            name = f"{name}, p99"
        baseline = percentile(baseline_samples, 0.99)
        return BenchResult(key, name, p99, "ms", baseline, p99 / baseline, "p99 <= 5 ms", p99 <= 5)

    def _both_stores(
        self,
        url: str,
        history: Callable[[], Iterable[list[StoredEvent]]],
        projection: str,
        samples: Sequence[Any],
        query: Callable[[WorkflowStore, Any], None],
    ) -> dict[str, list[float]]:
        """``query``'s latencies over ``samples``, from a store whose read model was built
        from ``history`` at ``url`` and from one that projected it live (see P6)."""
        with self._generated_store(url, history(), projection) as store:
            built = self._latencies(samples, partial(query, store))
        with self._projected_store(history()) as store:
            projected = self._latencies(samples, partial(query, store))
        return {"built": built, "projected live": projected}

    def p8_settings_at_change(self) -> BenchResult:
        """P8: milliseconds for settings_scope_at_change on a long-changed scope (p99), from
        a built store and from one that projected the history live."""
        url = self.scratch.new_url()
        total = self.settings_changes
        scope_id = "p8-run:$root:1"
        picker = random.Random(11)  # noqa: S311 - reproducible sampling
        numbers = [picker.randrange(0, total + 1) for _ in range(500)]

        def at_change(store: WorkflowStore, number: int) -> None:
            found = store.settings_scope_at_change(scope_id, number)
            if found is None or found.settings != {"counter": number}:
                raise AssertionError("settings_scope_at_change returned the wrong value")

        samples = self._both_stores(
            url,
            lambda: HistoryGenerator(prefix="p8").settings_events("p8-run", total),
            "settings",
            numbers,
            at_change,
        )
        baseline = Raw(url).query_latencies(
            "SELECT * FROM rl_set_changes WHERE scope_id = {m} AND change_number = {m}",
            [(scope_id, number) for number in numbers],
        )
        name = f"settings_scope_at_change on a scope with {total:,} changes"
        return self._p99_result("P8", name, samples, baseline)

    def p9_runs_list(self) -> BenchResult:
        """P9: milliseconds for a page of 100 of the runs list (p99), from a built store and
        from one that projected the history live."""
        url = self.scratch.new_url()
        total = self.listed_runs
        picker = random.Random(13)  # noqa: S311 - reproducible sampling
        cursors = [picker.randrange(1, total - 100) for _ in range(500)]

        def page_after(store: WorkflowStore, cursor: int) -> None:
            page = store.list_runs(after=f"p9-run-{cursor}", limit=100)
            if len(page.runs) != 100 or page.runs[0].run_id != f"p9-run-{cursor + 1}":
                raise AssertionError("list_runs returned the wrong page")

        samples = self._both_stores(
            url,
            lambda: HistoryGenerator(prefix="p9").created_runs(total),
            "runs",
            cursors,
            page_after,
        )
        baseline = Raw(url).query_latencies(
            "SELECT * FROM rl_runs WHERE position > "
            "(SELECT position FROM rl_runs WHERE run_id = {m}) ORDER BY position LIMIT 101",
            [(f"p9-run-{cursor}",) for cursor in cursors],
        )
        return self._p99_result(
            "P9", f"list_runs page of 100 from {total:,} runs", samples, baseline
        )

    def p10_session_events(self) -> BenchResult:
        """P10: session event records per second, 64 per append_session_events batch, in
        turns (``TURNS``) with plain multi-row inserts of as many rows into the same file."""
        url = self.scratch.new_url()
        raw = Raw(url)
        seconds = self.seconds / TURNS
        rates: dict[str, list[float]] = {"p10": [], "raw": [], "raw_spaced": []}
        processor: list[float] = []
        with open_store(url) as store, raw.connection() as connection:
            append, insert = session_appends(store), raw_batch_insert(raw, connection)
            batches = 0
            for _ in range(TURNS):
                rate, count, cpu = _timed_rate(append, seconds, first=batches)
                batches += count
                processor.append(cpu)
                rates["p10"].append(rate * SESSION_BATCH)
                rates["raw"].append(_counted_rate(insert, seconds)[0] * SESSION_BATCH)
                spaced_rate = _counted_rate(spaced(insert, cpu), seconds)[0]
                rates["raw_spaced"].append(spaced_rate * SESSION_BATCH)
        rate, baselines = matched_turns(rates.pop("p10"), rates)
        baseline = baselines["raw"]
        return BenchResult(
            "P10",
            f"append_session_events, batches of {SESSION_BATCH}, read models in-process "
            f"(median of {TURNS} turns, each beside the raw inserts; "
            f"{_spaced_note(rate, baselines['raw_spaced'], processor)})",
            rate,
            "events/s",
            baseline,
            rate / baseline,
            f">= 0.3 x raw multi-row inserts of {SESSION_BATCH} rows per commit",
            rate / baseline >= 0.3,
            baselines,
        )

    def p11_leases(self) -> BenchResult:
        """P11: claim_run and renew_claim commands per second (reported, no goal)."""
        url = self.scratch.new_url()
        baseline = Raw(url).insert_rate(self.seconds)
        rate = claim_renew_rate(url, self.seconds)
        return BenchResult(
            "P11",
            "claim_run / renew_claim, one writer",
            rate,
            "commands/s",
            baseline,
            rate / baseline,
            "report",
            True,
        )

    def _steps(self) -> dict[str, Callable[[], BenchResult | None]]:
        steps: dict[str, Callable[[], BenchResult | None]] = {"P1": self.p1_single_writer}
        if self.backend == "postgresql":
            steps["P2"] = self.p2_four_writers
        steps |= {
            "P2b": self.p2b_one_run,
            "P3": self.p3_rebuild,
            "P4": self.p4_visibility,
            "P5": self.p5_history_cost,
            "P6": self.p6_range,
            "P7": self.p7_viewer_bytes,
            "P8": self.p8_settings_at_change,
            "P9": self.p9_runs_list,
            "P10": self.p10_session_events,
            "P11": self.p11_leases,
            "P12": self.p12_settings_changes,
        }
        for key, measure in self.extra_rows:
            steps[key] = partial(measure, self)
        return {
            key: step for key, step in steps.items() if not self.only or key.upper() in self.only
        }

    def run(self) -> list[BenchResult]:
        """Run the chosen measurements, each isolated from the garbage of the earlier ones."""
        try:
            for key, step in self._steps().items():
                started = time.perf_counter()
                result = self._isolated(step)
                if result is not None:
                    took = time.perf_counter() - started
                    self.measured[result.id] = replace(result, seconds=took)
                self.advance(key)
            return list(self.measured.values())
        finally:
            self.scratch.close()

    @staticmethod
    def _isolated(step: Callable[[], BenchResult | None]) -> BenchResult | None:
        """Run a measurement with what earlier ones left behind out of the collector's way:
        otherwise a pass over their objects lands inside the timed queries of later ones."""
        gc.collect()
        gc.freeze()
        try:
            return step()
        finally:
            gc.unfreeze()

    def planned(self) -> list[str]:
        """The ids of the measurements ``run`` will make, in order."""
        return list(self._steps())
