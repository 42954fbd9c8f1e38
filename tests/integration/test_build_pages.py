"""A build's pages: long pages, and on PostgreSQL rows copied in and commits sent without
waiting for each (``views.deferred_commits``) and the next page read while one is projected
(``views.read_ahead``), give exactly the views built incrementally;
a page that fails stops the build, and a stall met half-way is recorded, not lost."""

from __future__ import annotations

import random
import string
import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import pq

from runledger.domain.errors import CorruptEventError, StorageUnavailableError
from runledger.domain.packed_state import ZSTD_V1
from runledger.infrastructure.cli.bench.runner import SESSION_BATCH, session_records
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.databases import PIPELINE_MAX_BYTES
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views import postgres as postgres_views
from runledger.infrastructure.views.deferred_commits import StagedPage
from runledger.infrastructure.views.read_ahead import ReadAhead
from runledger.infrastructure.views.rebuild import BUILD_CACHE_ROWS, BUILD_PAGE_SIZE
from runledger.infrastructure.views.sqlite import VIEW_AUTOCHECKPOINT, SQLiteViewStore
from runledger.infrastructure.views.store import TrackingConflictError
from tests.integration.test_parallel_rebuild import dump
from tests.integration.test_tampering import RawTable, raw
from tests.support.sessions import session_binding
from tests.unit.test_packed_state import _frame_claiming

EVENTS = 3 * BUILD_PAGE_SIZE + 500
"""Four pages of a build, more rows than its cache keeps (``BUILD_CACHE_ROWS``)."""


@pytest.fixture(params=["memory", "sqlite", "postgresql", "pgbouncer"])
def runtime(request: pytest.FixtureRequest, tmp_path: Any) -> Iterator[StoreRuntime]:
    """A store holding a history of ``EVENTS`` events that no projection read yet."""
    url = {
        "memory": lambda: "memory://",
        "sqlite": lambda: f"sqlite:///{tmp_path / 'runledger.db'}",
        "postgresql": lambda: str(request.getfixturevalue("postgres_store_url")),
        # A transaction pooler: the staging tables end with their transactions.
        "pgbouncer": lambda: str(request.getfixturevalue("pgbouncer_store_url")),
    }[request.param]()
    with open_runtime(url, embedded_projections=False) as opened:
        for batch in HistoryGenerator(seed=3, prefix="pages").batches(EVENTS):
            opened.storage.events.insert_events(batch)
        yield opened


@pytest.fixture
def staged(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The number of pages each PostgreSQL build commit staged, as they go."""
    pages: list[int] = []
    original = postgres_views.PostgresViewStore.stage_page

    def counted(self: Any, cursor: Any, commits: Any) -> Any:
        pages.append(len(commits))
        return original(self, cursor, commits)

    monkeypatch.setattr(postgres_views.PostgresViewStore, "stage_page", counted)
    return pages


@pytest.fixture
def read_ahead(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The size of each page a build took from its read-ahead, as it goes."""
    pages: list[int] = []
    original = ReadAhead.take

    def counted(self: ReadAhead, after: int) -> Any:
        page = original(self, after)
        if page is not None:
            pages.append(len(page))
        return page

    monkeypatch.setattr(ReadAhead, "take", counted)
    return pages


def test_a_build_of_several_pages_gives_the_views_built_incrementally(
    runtime: StoreRuntime, staged: list[int], read_ahead: list[int]
) -> None:
    assert EVENTS > BUILD_CACHE_ROWS
    runtime.catch_up()
    incremental = dump(runtime)
    assert sum(map(len, incremental.values())) > BUILD_CACHE_ROWS

    read = runtime.rebuild_projections()

    assert read == runtime.storage.max_position()
    assert dump(runtime) == incremental
    assert {status.lag for status in runtime.projection_status()} == {0}
    if runtime.backend == "postgresql":  # also through the pooler
        assert len(staged) >= 4, "the build's pages went through the deferred commits"
        # Each page after the first was read while the one before it was projected.
        assert len(read_ahead) >= 3
        assert sum(read_ahead) + BUILD_PAGE_SIZE >= EVENTS
    else:
        assert staged == []
        assert read_ahead == []


def test_a_build_over_its_cache_bound_never_fetches_a_small_table_every_event_reads(
    runtime: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each message created reads its session's counter. Over the bound, the big tables
    # give their rows up; in one order for all tables the counters went with them and came
    # back from the store one round trip each (193 of them in a PostgreSQL rebuild).
    runtime.catch_up()
    incremental = dump(runtime)
    fetched: Counter[str] = Counter()
    fetch = runtime.views.fetch

    def counted(table: Any, key: Any, slot: Any) -> Any:
        fetched[table.name] += 1
        return fetch(table, key, slot)

    monkeypatch.setattr(runtime.views, "fetch", counted)
    sessions = {row["target_session_id"] for row in incremental["rl_so_sessions"]}
    messages = len(incremental["rl_so_messages"])
    assert messages > BUILD_CACHE_ROWS > len(sessions)

    runtime.rebuild_projections(["session_outbox"])

    assert dump(runtime) == incremental
    assert fetched["rl_so_sessions"] == 0


def test_a_blue_green_build_compares_equal_and_switches(runtime: StoreRuntime) -> None:
    runtime.catch_up()

    outcomes = runtime.rebuild_blue_green()

    assert [(o.compared, o.equal, o.switched) for o in outcomes] == [("rows", True, True)] * len(
        outcomes
    )


def test_a_stall_met_pages_into_a_build_is_recorded_with_its_position(durable_url: str) -> None:
    url = durable_url
    with open_runtime(url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(seed=3, prefix="pages").batches(EVENTS):
            runtime.storage.events.insert_events(batch)
    table = RawTable(url)
    last = table.last("run.created")
    assert last.position > 2 * BUILD_PAGE_SIZE, "the stall comes pages into the build"
    table.replace(raw(state=b"42")(last))

    with open_runtime(url, embedded_projections=False) as runtime:
        with pytest.raises(CorruptEventError) as raised:
            runtime.rebuild_projections()

        assert raised.value.position == last.position
        building = [runtime.views.registry(name).building for name in runtime.projection_names()]
        for state in building:
            assert state is not None, "the builds stay, stalled, for the next rebuild to meet"
            assert state.position < last.position
            assert state.last_error is not None
            assert f"at position {last.position}" in state.last_error


@pytest.mark.parametrize("damage", ["truncated frame", "lying claimed size"])
def test_a_damaged_packed_payload_pages_into_a_build_stops_it_naming_its_position(
    durable_url: str, damage: str
) -> None:
    # On PostgreSQL that page was read, and its frames unpacked, by the read-ahead thread.
    with open_runtime(durable_url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(seed=3, prefix="pages").batches(EVENTS):
            runtime.storage.events.insert_events(batch)
    table = RawTable(durable_url)
    last = table.last("run.created")
    assert last.position > 2 * BUILD_PAGE_SIZE
    assert last.state[0] == ZSTD_V1
    broken = (
        last.state[: len(last.state) // 2]
        if damage == "truncated frame"
        else b"\x01" + _frame_claiming(4096)
    )
    table.replace(raw(state=broken)(last))

    with (
        open_runtime(durable_url, embedded_projections=False) as runtime,
        pytest.raises(CorruptEventError) as raised,
    ):
        runtime.rebuild_projections()

    assert raised.value.position == last.position
    assert "packed payload" in raised.value.reason


def test_a_sqlite_build_leaves_its_checkpoints_to_a_thread_and_restores_its_connection(
    tmp_path: Any,
) -> None:
    url = f"sqlite:///{tmp_path / 'runledger.db'}"
    wal = tmp_path / "runledger.db-wal"
    with open_runtime(url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(seed=3, prefix="pages").batches(EVENTS):
            runtime.storage.events.insert_events(batch)
        runtime.catch_up()
        incremental = dump(runtime)
        views = runtime.views
        assert isinstance(views, SQLiteViewStore)
        connection = views._connection()  # the build runs on this thread
        # The catch-up's own log is emptied first: it is the build's the thread must bound.
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        seen: list[tuple[int, bool]] = []

        def look() -> None:
            automatic = connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0]
            threads = {thread.name for thread in threading.enumerate()}
            seen.append((automatic, "runledger-wal-checkpoints" in threads))

        names = runtime.projection_names()
        runtime.builds.rebuild(names, accept=True, drop_old=True, on_page=look)
        runtime.projector.reload(names)

        assert len(seen) >= 4
        assert set(seen) == {(0, True)}, "no automatic checkpoint in the build's commits"
        assert connection.execute("PRAGMA wal_autocheckpoint").fetchone()[0] == (
            VIEW_AUTOCHECKPOINT
        )
        assert "runledger-wal-checkpoints" not in {t.name for t in threading.enumerate()}
        assert dump(runtime) == incremental
        # The thread kept the log from holding the whole build: the build wrote more than
        # the file's size, and the log was reset behind it.
        assert wal.stat().st_size < (tmp_path / "runledger.db").stat().st_size


LOSE_THE_SLOT = (
    # Another writer moves the building slots' tracking, as a build that lost its lock
    # would find: the next page's compare-and-set fails.
    "UPDATE runledger_view_slots SET position = position + 1000000 WHERE state = 'building'"
)
END_THE_SESSIONS = (
    # The server ends every session of the store's database but the one sending this, the
    # build's among them, with a page under way.
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("fault", "error", "restart"),
    [
        pytest.param(LOSE_THE_SLOT, TrackingConflictError, True, id="slot-moved"),
        pytest.param(END_THE_SESSIONS, StorageUnavailableError, False, id="sessions-ended"),
    ],
)
def test_a_build_whose_page_fails_stops_unswitched_and_the_next_build_gives_the_views(
    postgres_store_url: str, fault: str, error: type[Exception], restart: bool
) -> None:
    with open_runtime(postgres_store_url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(seed=3, prefix="pages").batches(EVENTS):
            runtime.storage.events.insert_events(batch)
        runtime.catch_up()
        incremental = dump(runtime)
        active = {state.name: state.slot for state in runtime.views.tracking()}
        pages = 0

        def break_after_the_first_page() -> None:
            nonlocal pages
            pages += 1
            if pages == 1:
                with psycopg.connect(postgres_store_url, autocommit=True) as other:
                    other.execute(fault)

        names = runtime.projection_names()
        with pytest.raises(error):
            runtime.builds.rebuild(names, accept=True, on_page=break_after_the_first_page)

        assert {state.name: state.slot for state in runtime.views.tracking()} == active
        # A moved slot holds no position to resume from; an ended session's build resumes.
        runtime.builds.rebuild(names, accept=True, restart=restart, drop_old=True)
        runtime.projector.reload(names)
        assert dump(runtime) == incremental


def random_records(first: int, rng: random.Random) -> list[dict[str, Any]]:
    """A batch of session records whose outputs zstd cannot shrink much: 3,000 random
    letters each."""
    records = session_records(first)
    for record in records:
        record["payload"]["output"] = "".join(rng.choices(string.ascii_letters, k=3_000))
    return records


@pytest.mark.postgres
def test_a_page_sending_more_text_than_a_pipeline_takes_sends_it_statement_by_statement(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    sent: list[tuple[int, pq.PipelineStatus]] = []
    original = postgres_views.PostgresViewStore.stage_page

    def counted(self: Any, cursor: Any, pages: Any) -> StagedPage:
        staged = original(self, cursor, pages)

        def write(cursor: Any) -> None:
            sent.append((staged.text_bytes, cursor.connection.pgconn.pipeline_status))
            staged.write(cursor)

        return StagedPage(write, staged.text_bytes)

    monkeypatch.setattr(postgres_views.PostgresViewStore, "stage_page", counted)
    rng = random.Random(7)
    with open_runtime(postgres_store_url, embedded_projections=False) as runtime:
        store = WorkflowStore(runtime)
        store.create_run("large", workflow_name="bench", input={})
        store.record_session_binding("large", session_binding("large", "large-session"))
        # Each batch shows as one viewer revision of about 190 KB, too few in a page
        # (under ``STAGED_ROWS``) to be copied in: they go out as statements.
        for batch in range(40):
            store.append_session_events("large", random_records(batch * SESSION_BATCH + 1, rng))
        runtime.catch_up()
        incremental = dump(runtime)
        sent.clear()

        runtime.rebuild_projections()

        assert dump(runtime) == incremental
    assert any(size > PIPELINE_MAX_BYTES for size, _ in sent)
    for size, mode in sent:
        expected = pq.PipelineStatus.OFF if size > PIPELINE_MAX_BYTES else pq.PipelineStatus.ON
        assert mode == expected, size
