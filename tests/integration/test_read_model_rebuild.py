"""The read models are a function of the event log alone, on every backend.

A rich, deterministic history (several runs and sessions, a continuation, a restart,
follow-ups queued, removed, cancelled and sent, messages, turns, 300 follow-ups on one run and
300 changes of another) is built once per backend for this module. On it: a rebuild from the
log gives exactly the rows built incrementally; memory, a SQLite file and PostgreSQL answer
every query alike; and the upstream viewer scenarios that need hundreds of events (I2, I4).
Then what happens to views across store openings: a stale projection version, and two
embedded stores sharing one database.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest

from runledger.domain.application import WorkflowRuns
from runledger.domain.errors import ProjectionVersionError
from runledger.domain.ids import follow_up_message_id
from runledger.domain.records import SnapshotRequired, ViewerDelta, ViewerDeltas
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store
from runledger.projections.base import Key, ProjectedEvent, Row, ViewWriter
from runledger.projections.terminal_data import TerminalDataProjection
from tests.integration.conftest import BACKENDS
from tests.support.clock import FakeClock
from tests.support.outbox_commands import cancel_pending_for_source
from tests.support.postgres import PostgresServer
from tests.support.scenario import (
    HUMAN,
    IC,
    OTHER_SESSION,
    RUN,
    SESSION,
    SESSION_ACTOR,
    WT,
    create,
    deliver,
    notify,
    present_terminal,
    queue,
    queued_id,
    restart,
    running_run,
    step,
    waiting_run,
)

PROJECTIONS = (
    "follow_up_queue",
    "terminal_data",
    "viewer_deltas",
    "session_outbox",
    "settings",
    "runs",
)

WINDOW_RUN = "run-window"
WINDOW_SESSION = "session-3"
WINDOW_FOLLOW_UPS = 300
"""I2: follow-ups on one run, more than the viewer's 256-item page."""
REVISIONS_RUN = "run-revisions"
CHANGES = 300
"""I4: run writes after the viewer's initialisation at revision 1."""

Dump = dict[str, dict[Key, Row]]
"""A projection's rows: table name -> primary key -> row."""


# -- the rich scenario --------------------------------------------------------------------------


def completed_run_with_follow_ups(store: WorkflowStore) -> list[str]:
    """Follow-ups delivered, removed, adopted and left queued on a run that completes."""
    run_id = "run-done"
    running_run(store, run_id)
    store.set_presentation_instructions(run_id, "Summarise briefly.")
    delivered = queued_id(store, "done-1", run_id=run_id, prompt="First task")
    removed = queued_id(store, "done-2", run_id=run_id, prompt="Second task")
    queue(store, "done-3", run_id=run_id, prompt="Third task", actor=HUMAN, source=IC)
    store.remove_follow_up(run_id, removed, actor=SESSION_ACTOR, source=WT)
    notification = notify(store, "notification-done", run_id=run_id)
    deliver(store, notification.workflow_message_id, "entry-notification-done")
    store.finish_run(run_id, status="completed", final_output={"reply": "done"})
    queue(store, "done-1", run_id=run_id, prompt="First task")  # adopted: writes nothing
    present_terminal(store, run_id)
    message_id = follow_up_message_id(delivered)
    deliver(store, message_id, "entry-done-1")
    store.start_turn(message_id, run_id=run_id, target_session_id=SESSION, workflow_turn_id="t-1")
    store.end_turn("t-1", stop_reason="completed", response_session_entry_id="assistant-done-1")
    return [run_id]


def failed_continuation(store: WorkflowStore) -> list[str]:
    """A continuation fails: its own and its waiting parent's follow-ups are cancelled."""
    parent, child = "run-parent", "run-child"
    waiting_run(store, parent)
    queue(store, "parent-1", run_id=parent, prompt="Continue later", actor=HUMAN, source=IC)
    create(store, child, parent_run_id=parent)
    store.bind_origin_session(child, SESSION)
    late = queued_id(store, "child-1", run_id=child, prompt="Child task")
    store.finish_run(child, status="failed", error="boom")
    # Branch evidence for a cancelled message still makes it sent (upstream D5).
    deliver(store, follow_up_message_id(late), "entry-child-1")
    store.interrupt_run(parent)  # waiting, not running: nothing happens
    store.record_progress(parent, status="running", current_node="resume")
    store.interrupt_run(parent)
    return [parent, child]


def restarted_run(store: WorkflowStore) -> list[str]:
    """A failed run restarted from its presented terminal result; the restart completes."""
    run_id = "run-flaky"
    running_run(store, run_id, input={"task": "flaky"})
    store.finish_run(run_id, status="failed", error="flaky")
    child = restart(store, run_id).run_id
    store.record_progress(child, status="running", current_node="hold")
    queue(store, "restart-1", run_id=child, prompt="After the restart")
    store.finish_run(child, status="completed", final_output={"attempt": 2})
    return [run_id, child]


def paused_run_with_steps(store: WorkflowStore, app: WorkflowRuns) -> list[str]:
    """Steps across a pause, a cancelled notification, a delivered step, then a wait."""
    run_id = "run-steps"
    running_run(store, run_id, session_id=OTHER_SESSION)
    first_step = step(store, "interaction-1", run_id=run_id)
    store.pause_run(run_id, status_detail="Paused by the user")
    step(store, "interaction-2", run_id=run_id)
    store.resume_run(run_id)
    notify(store, "notification-steps", run_id=run_id)
    # Not in the host's API (DESIGN lists no such command): the application behind the store.
    cancel_pending_for_source(app, "notification-steps", kind="notification")
    deliver(store, first_step.workflow_message_id, "entry-step-1", session_id=OTHER_SESSION)
    store.record_progress(run_id, status="waiting", waiting_on="approval")
    return [run_id]


def timed_out_run(store: WorkflowStore) -> list[str]:
    """A run times out: its queued follow-up is cancelled with the status as reason."""
    run_id = "run-slow"
    running_run(store, run_id, session_id=OTHER_SESSION)
    actor = Actor("session", OTHER_SESSION)
    queue(store, "slow-1", run_id=run_id, target_session_id=OTHER_SESSION, actor=actor)
    removed = queued_id(
        store, "slow-2", run_id=run_id, target_session_id=OTHER_SESSION, actor=actor
    )
    store.remove_follow_up(run_id, removed, actor=HUMAN, source=IC)
    store.finish_run(run_id, status="timed_out", status_detail="Deadline passed")
    return [run_id]


def run_with_300_follow_ups(store: WorkflowStore) -> list[str]:
    """I2: 300 follow-ups on one run, in a session of their own."""
    running_run(store, WINDOW_RUN, session_id=WINDOW_SESSION)
    actor = Actor("session", WINDOW_SESSION)
    for number in range(1, WINDOW_FOLLOW_UPS + 1):
        queue(
            store,
            f"window-{number}",
            run_id=WINDOW_RUN,
            target_session_id=WINDOW_SESSION,
            actor=actor,
            prompt=f"Task {number}",
        )
    return [WINDOW_RUN]


def run_changed_300_times(store: WorkflowStore) -> list[str]:
    """I4: a run created (viewer revision 1), then changed 300 times."""
    create(store, REVISIONS_RUN)
    for number in range(CHANGES):
        store.record_progress(REVISIONS_RUN, status="running", current_node=f"node-{number}")
    return [REVISIONS_RUN]


def run_with_settings(store: WorkflowStore) -> list[str]:
    """Two settings scopes changed, handed over to a continuation, and progress updates."""
    parent, child = "run-settings", "run-settings-continued"
    running_run(store, parent)
    policy = {"rules": [{"path": "", "permissions": {"human": ["read", "add", "replace"]}}]}
    root = store.ensure_settings_scope(parent, settings={"mode": "a"}, policy=policy)
    store.ensure_settings_scope(parent, mount_path="first", settings={"v": 1}, policy=policy)
    for number, mode in enumerate(("b", "c"), start=1):
        store.change_settings(
            parent,
            root.scope_id,
            request_id=f"settings-{number}",
            actor=HUMAN,
            source=IC,
            patch=[{"op": "replace", "path": "/mode", "value": mode}],
        )
    store.publish_update(parent, attempt_id="a-1", update_type="progress", key="k", data=1)
    store.publish_update(parent, attempt_id="a-1", update_type="progress", key="k", data=2)
    create(store, child, parent_run_id=parent)
    return [parent, child]


@dataclass(frozen=True)
class Scenario:
    run_ids: tuple[str, ...]
    session_ids: tuple[str, ...] = (SESSION, OTHER_SESSION, WINDOW_SESSION)


def build_rich_scenario(runtime: StoreRuntime) -> Scenario:
    """The same commands in the same order, so the same events at the same (fake) times."""
    store = WorkflowStore(runtime)
    run_ids = [
        *completed_run_with_follow_ups(store),
        *failed_continuation(store),
        *restarted_run(store),
        *paused_run_with_steps(store, runtime.app),
        *timed_out_run(store),
        *run_with_300_follow_ups(store),
        *run_changed_300_times(store),
        *run_with_settings(store),
    ]
    return Scenario(run_ids=tuple(run_ids))


# -- one store per backend with the rich scenario, shared by this module ----------------------


def dump(runtime: StoreRuntime, name: str) -> Dump:
    """Every row of every table of the projection, by primary key, once it caught up."""
    runtime.catch_up()
    reader = runtime.views.reader()
    return {
        table.name: {table.key_of(row): row for row in reader.scan(table)}
        for table in runtime.projector.runner(name).projection.tables
    }


def dump_all(runtime: StoreRuntime) -> dict[str, Dump]:
    return {name: dump(runtime, name) for name in PROJECTIONS}


def row_differences(expected: Dump, actual: Dump) -> list[str]:
    """What differs between two dumps, row by row (for assertion messages)."""
    differences: list[str] = []
    for table in sorted(set(expected) | set(actual)):
        before, after = expected.get(table, {}), actual.get(table, {})
        for key in sorted(set(before) | set(after), key=repr):
            if before.get(key) != after.get(key):
                differences.append(f"{table}{list(key)}: {before.get(key)} != {after.get(key)}")
    return differences


def assert_same_rows(expected: Dump, actual: Dump, what: str) -> None:
    differences = row_differences(expected, actual)
    assert not differences, (
        f"{what}: {len(differences)} rows differ, first: {differences[0][:2000]}"
    )


@dataclass
class Built:
    """A store holding the rich scenario, and its views as built incrementally."""

    runtime: StoreRuntime
    scenario: Scenario
    incremental: dict[str, Dump]

    @property
    def store(self) -> WorkflowStore:
        return WorkflowStore(self.runtime)


@dataclass
class RichStores:
    """The rich scenario's store per backend, built on first use and closed with the module."""

    tmp_path_factory: pytest.TempPathFactory
    built: dict[str, Built] = field(default_factory=dict)
    cleanups: list[Callable[[], None]] = field(default_factory=list)

    def get(self, backend: str, request: pytest.FixtureRequest) -> Built:
        if backend not in self.built:
            runtime = open_runtime(self._new_url(backend, request), clock=FakeClock())
            self.cleanups.append(runtime.close)
            scenario = build_rich_scenario(runtime)
            self.built[backend] = Built(runtime, scenario, dump_all(runtime))
        return self.built[backend]

    def _new_url(self, backend: str, request: pytest.FixtureRequest) -> str:
        if backend == "memory":
            return "memory://"
        if backend == "sqlite":
            return f"sqlite:///{self.tmp_path_factory.mktemp('rich') / 'runledger.db'}"
        server: PostgresServer = request.getfixturevalue("postgres_server")
        name = server.new_database_name()
        url = server.create_database(name)
        self.cleanups.append(lambda: server.drop_database(name))
        return url

    def close(self) -> None:
        # Stores close before their databases are dropped: cleanups run newest first.
        for cleanup in reversed(self.cleanups):
            cleanup()


@pytest.fixture(scope="module")
def rich_stores(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RichStores]:
    stores = RichStores(tmp_path_factory)
    try:
        yield stores
    finally:
        stores.close()


@pytest.fixture(params=BACKENDS)
def rich(request: pytest.FixtureRequest, rich_stores: RichStores) -> Built:
    """The rich scenario on the parametrised backend."""
    backend: str = request.param
    return rich_stores.get(backend, request)


def test_the_rich_scenario_writes_rows_into_every_table_of_every_projection(rich: Built) -> None:
    empty = [
        table for tables in rich.incremental.values() for table, rows in tables.items() if not rows
    ]

    assert empty == [], "a rebuild compared on an empty table proves nothing"


# -- a rebuild from the log gives the rows built incrementally -----------------------------------


@pytest.mark.parametrize("name", PROJECTIONS)
def test_a_rebuild_of_one_projection_gives_exactly_the_rows_built_incrementally(
    rich: Built, name: str
) -> None:
    rich.store.rebuild_projection(name)

    assert_same_rows(rich.incremental[name], dump(rich.runtime, name), f"rebuilt {name}")


def test_a_rebuild_of_all_projections_at_once_gives_exactly_the_rows_built_incrementally(
    rich: Built,
) -> None:
    rich.runtime.rebuild_projections()

    rebuilt = dump_all(rich.runtime)
    for name in PROJECTIONS:
        assert_same_rows(rich.incremental[name], rebuilt[name], f"{name} rebuilt with the others")


def test_a_rebuild_leaves_every_projection_at_the_end_of_the_log(rich: Built) -> None:
    rich.runtime.rebuild_projections()

    lags = {status.name: status.lag for status in rich.store.projection_status()}

    assert lags == dict.fromkeys(PROJECTIONS, 0)


# -- every backend answers every query alike ----------------------------------------------------


def dumped(value: Any) -> Any:
    """A query result as plain JSON values, for comparison across backends."""
    if value is None:
        return None
    if isinstance(value, list):
        return [item.model_dump(mode="json") for item in value]
    return value.model_dump(mode="json")


def query_results(store: WorkflowStore, scenario: Scenario) -> dict[str, Any]:
    """Every read-model query for every run and session of the scenario (and unknown ones)."""
    results: dict[str, Any] = {}
    for run_id in (*scenario.run_ids, "run-unknown"):
        results[f"follow_up_queue({run_id})"] = dumped(store.follow_up_queue(run_id))
        for start, limit in ((0, 2), (1, 256), (250, 100)):
            range_read = store.follow_up_queue_range(run_id, start=start, limit=limit)
            results[f"follow_up_queue_range({run_id}, {start}, {limit})"] = dumped(range_read)
        results[f"terminal_data({run_id})"] = dumped(store.terminal_data(run_id))
    for run_id in scenario.run_ids:
        current = store.viewer_deltas(run_id, after_revision=0).current_revision
        cursors = {0, 1, current - 20, current - 1, current, current + 1}
        for cursor in sorted(cursor for cursor in cursors if cursor >= 0):
            page = store.viewer_deltas(run_id, after_revision=cursor)
            results[f"viewer_deltas({run_id}, {cursor})"] = dumped(page)
    for session_id in (*scenario.session_ids, "session-unknown"):
        results[f"session_outbox({session_id})"] = dumped(store.session_outbox(session_id))
        results[f"next_deliverable({session_id})"] = dumped(store.next_deliverable(session_id))
    return results


def assert_same_results(left: Built, right: Built, names: tuple[str, str]) -> None:
    assert left.scenario == right.scenario, "both backends must have run the same scenario"
    expected = query_results(left.store, left.scenario)
    actual = query_results(right.store, right.scenario)
    differing = [query for query in expected if expected[query] != actual.get(query)]
    first = differing[0] if differing else ""
    assert not differing, (
        f"{names[0]} and {names[1]} answer {len(differing)} of {len(expected)} queries "
        f"differently, first {first}: {str(expected[first])[:1000]} != "
        f"{str(actual.get(first))[:1000]}"
    )


def test_memory_and_a_sqlite_file_give_the_same_query_results(
    rich_stores: RichStores, request: pytest.FixtureRequest
) -> None:
    memory = rich_stores.get("memory", request)
    sqlite = rich_stores.get("sqlite", request)

    assert_same_results(memory, sqlite, ("memory", "SQLite"))


@pytest.mark.postgres
def test_a_sqlite_file_and_postgresql_give_the_same_query_results(
    rich_stores: RichStores, request: pytest.FixtureRequest
) -> None:
    sqlite = rich_stores.get("sqlite", request)
    postgresql = rich_stores.get("postgresql", request)

    assert_same_results(sqlite, postgresql, ("SQLite", "PostgreSQL"))


def rich_digests(built: Built) -> dict[str, str]:
    return {name: built.store.read_model_digest(name) for name in PROJECTIONS}


def test_memory_and_a_sqlite_file_give_the_same_digests(
    rich_stores: RichStores, request: pytest.FixtureRequest
) -> None:
    memory = rich_stores.get("memory", request)
    sqlite = rich_stores.get("sqlite", request)

    assert rich_digests(memory) == rich_digests(sqlite)


@pytest.mark.postgres
def test_a_sqlite_file_and_postgresql_give_the_same_digests(
    rich_stores: RichStores, request: pytest.FixtureRequest
) -> None:
    sqlite = rich_stores.get("sqlite", request)
    postgresql = rich_stores.get("postgresql", request)

    assert rich_digests(sqlite) == rich_digests(postgresql)


def test_a_rebuild_of_the_rich_scenario_keeps_every_digest(rich: Built) -> None:
    before = rich_digests(rich)

    rich.runtime.rebuild_projections()

    assert rich_digests(rich) == before


# -- I2, I4: viewer deltas over hundreds of events -----------------------------------------------


def newest_deltas(store: WorkflowStore, run_id: str) -> list[ViewerDelta]:
    current = store.viewer_deltas(run_id, after_revision=0).current_revision
    page = store.viewer_deltas(run_id, after_revision=current - 1)
    assert isinstance(page, ViewerDeltas), f"revision {current} of {run_id} is not retained"
    return page.deltas


def test_i2_with_300_follow_ups_the_inspector_shows_the_last_256(rich: Built) -> None:
    [_, delta] = newest_deltas(rich.store, WINDOW_RUN)

    values: dict[str, Any] = {op["path"]: op.get("value") for op in delta.patch}

    assert (
        values["/followUpStart"],
        [item["order"] for item in values["/followUpQueue"]["items"]],
        values["/followUpTotal"],
    ) == (44, list(range(45, 301)), 300)


def test_i4_after_300_changes_the_deltas_after_45_are_revisions_46_to_301(rich: Built) -> None:
    page = rich.store.viewer_deltas(REVISIONS_RUN, after_revision=45)

    assert isinstance(page, ViewerDeltas), f"expected deltas, got {page}"
    assert (
        page.current_revision,
        page.retained_from_revision,
        list(dict.fromkeys(delta.presentation_revision for delta in page.deltas)),
    ) == (301, 46, list(range(46, 302)))


@pytest.mark.parametrize("cursor", [44, 0, 302])
def test_i4_a_cursor_outside_the_retained_revisions_requires_a_snapshot(
    rich: Built, cursor: int
) -> None:
    assert rich.store.viewer_deltas(REVISIONS_RUN, after_revision=cursor) == SnapshotRequired(
        current_revision=301, retained_from_revision=46
    )


def test_i4_a_viewer_at_the_current_revision_gets_no_deltas(rich: Built) -> None:
    assert rich.store.viewer_deltas(REVISIONS_RUN, after_revision=301) == ViewerDeltas(
        current_revision=301, retained_from_revision=46, deltas=[]
    )


# -- views across store openings: stale versions, two stores on one database -------------------


def execute_sql(url: str, statement: str) -> None:
    """Change the stored views behind the stores' backs."""
    if url.startswith("sqlite:///"):
        connection = sqlite3.connect(url.removeprefix("sqlite:///"))
        try:
            connection.execute(statement)
            connection.commit()
        finally:
            connection.close()
    else:
        with psycopg.connect(url, autocommit=True) as server:
            server.execute(statement)


WRONG_ROW = "UPDATE rl_td_runs_v1_1 SET status = NULL WHERE run_id = 'run-1'"
"""Spoils the row of R in terminal data's first slot (``<table>_v<version>_<slot>``)."""


def completed_run_on(url: str) -> Any:
    """R completed, on a store opened and closed again; returns its terminal data."""
    with open_store(url, clock=FakeClock()) as store:
        running_run(store)
        store.finish_run(RUN, status="completed", final_output={"reply": "done"})
        return store.terminal_data(RUN)


@pytest.fixture
def newer_terminal_data(monkeypatch: pytest.MonkeyPatch) -> int:
    """The code of terminal data at the next version, as after a deployment."""
    version = TerminalDataProjection.version + 1
    monkeypatch.setattr(TerminalDataProjection, "version", version)
    return version


def test_a_store_opening_with_a_newer_projection_version_builds_it_from_the_log(
    durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    expected = completed_run_on(durable_url)
    execute_sql(durable_url, WRONG_ROW)
    monkeypatch.setattr(TerminalDataProjection, "version", TerminalDataProjection.version + 1)

    with open_store(durable_url, clock=FakeClock()) as reopened:
        assert reopened.terminal_data(RUN) == expected, "the new version is built from the log"


def test_a_store_opening_with_a_newer_version_switches_to_it_at_the_end_of_the_log(
    durable_url: str, newer_terminal_data: int
) -> None:
    with open_store(durable_url, clock=FakeClock(), projections=["terminal_data"]) as first:
        running_run(first)
    newer = newer_terminal_data

    with open_store(durable_url, clock=FakeClock()) as reopened:
        [status] = [s for s in reopened.projection_status() if s.name == "terminal_data"]

    assert (
        status.version,
        status.active_version,
        status.building_version,
        status.lag,
        status.last_error,
    ) == (newer, newer, None, 0, None)


def test_the_old_version_stays_for_processes_still_running_the_old_code(
    durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    completed_run_on(durable_url)
    old = TerminalDataProjection.version
    monkeypatch.setattr(TerminalDataProjection, "version", old + 1)
    open_store(durable_url, clock=FakeClock()).close()
    monkeypatch.setattr(TerminalDataProjection, "version", old)

    with open_runtime(durable_url, clock=FakeClock()) as runtime:
        retired = runtime.views.retired_slots("terminal_data")

    assert [(slot.version, slot.state) for slot in retired] == [(old, "retired")]


def test_older_code_on_a_store_with_a_newer_version_refuses_to_answer(
    durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    completed_run_on(durable_url)
    old = TerminalDataProjection.version
    monkeypatch.setattr(TerminalDataProjection, "version", old + 1)
    open_store(durable_url, clock=FakeClock()).close()
    monkeypatch.setattr(TerminalDataProjection, "version", old)

    with (
        open_store(durable_url, clock=FakeClock()) as older,
        pytest.raises(ProjectionVersionError) as raised,
    ):
        older.terminal_data(RUN)

    assert f"is at version {old + 1} in the store, this code reads version {old}" in str(
        raised.value
    )


def test_a_projection_at_the_codes_version_is_not_rebuilt_when_a_store_opens(
    durable_url: str,
) -> None:
    completed_run_on(durable_url)
    execute_sql(durable_url, WRONG_ROW)

    with open_store(durable_url, clock=FakeClock()) as reopened:
        assert reopened.terminal_data(RUN) is None, "a current view is kept as it is"


def test_a_second_embedded_store_reads_the_commands_of_the_first(durable_url: str) -> None:
    clock = FakeClock()
    with (
        open_store(durable_url, clock=clock) as first,
        open_store(durable_url, clock=clock) as second,
    ):
        running_run(first)
        follow_up_id = queued_id(first)

        read = second.follow_up_queue(RUN)

    assert read is not None, "the second store must see the binding"
    assert [f.follow_up_id for f in read.follow_ups] == [follow_up_id]


def test_a_stall_that_another_store_rebuilt_away_no_longer_stalls_the_queries(
    durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = FakeClock()
    with open_runtime(durable_url, clock=clock) as broken_runtime:
        broken = WorkflowStore(broken_runtime)
        projection = broken_runtime.projector.runner("follow_up_queue").projection
        apply = projection.apply

        def failing_on_queued(event: ProjectedEvent, view: ViewWriter) -> None:
            if event.wire_name == "follow-up.queued":
                raise RuntimeError("projection bug under test")
            apply(event, view)

        monkeypatch.setattr(projection, "apply", failing_on_queued)
        running_run(broken)
        follow_up_id = queued_id(broken)
        broken.projection_status()
        with open_store(durable_url, clock=clock) as host:
            monkeypatch.undo()
            broken.rebuild_projection("follow_up_queue")

            read = host.follow_up_queue(RUN)

    assert read is not None, "the host must read the rebuilt queue"
    assert [f.follow_up_id for f in read.follow_ups] == [follow_up_id]


def test_two_embedded_stores_on_one_database_apply_every_event_once(durable_url: str) -> None:
    clock = FakeClock()
    with (
        open_runtime(durable_url, clock=clock) as first_runtime,
        open_runtime(durable_url, clock=clock) as second_runtime,
    ):
        first, second = WorkflowStore(first_runtime), WorkflowStore(second_runtime)
        # Commands alternate between the stores, each followed by a query on the other.
        running_run(first)
        queue(second, "follow-1")
        first.follow_up_queue(RUN)
        notify(first, "notification-1")
        second.session_outbox(SESSION)
        removed = queued_id(first, "follow-2", prompt="Second task")
        second.remove_follow_up(RUN, removed, actor=SESSION_ACTOR, source=WT)
        first.viewer_deltas(RUN, after_revision=1)
        second.finish_run(RUN, status="completed", final_output={"reply": "done"})
        first.terminal_data(RUN)
        present_terminal(first)
        second.next_deliverable(SESSION)
        running_run(second, "run-2")
        queue(first, "follow-3", run_id="run-2")
        first.finish_run("run-2", status="failed", error="boom")
        second.follow_up_queue("run-2")
        first_runtime.catch_up()
        incremental = dump_all(first_runtime)

        first_runtime.rebuild_projections()

        rebuilt = dump_all(second_runtime)
    for name in PROJECTIONS:
        assert_same_rows(rebuilt[name], incremental[name], f"{name} of two stores")


def _counting_reads(runtime: StoreRuntime) -> list[int]:
    """The number of events each read of the log returns from now on (the storage's own
    reader, wrapped on this instance)."""
    counts: list[int] = []
    read_log = runtime.storage.read_log

    def counted(*, after: int, limit: int, settled_through: int = 0) -> Any:
        entries = read_log(after=after, limit=limit, settled_through=settled_through)
        counts.append(len(entries))
        return entries

    runtime.storage.read_log = counted  # type: ignore[method-assign]
    return counts


def _host_history(host: StoreRuntime) -> int:
    """Commands by a host that does not project, so its live read models lag at 0; returns
    the log's length."""
    store = WorkflowStore(host)
    store.create_run("run-lagging", workflow_name="echo", input={})
    store.bind_origin_session("run-lagging", "session-1")
    for number in range(20):
        store.queue_follow_up(
            "run-lagging",
            request_id=f"request-{number}",
            target_session_id="session-1",
            actor=Actor("session", "session-1"),
            source="workflow-tool",
            prompt=f"Task {number}",
        )
    return len(host.storage.read_log(after=0, limit=10_000))


@dataclass
class Lagging:
    """A host that does not project, its log's length, and the events each read returns."""

    runtime: StoreRuntime
    length: int
    reads: list[int]


@pytest.fixture
def lagging(store_url: str, clock: FakeClock) -> Iterator[Lagging]:
    with open_runtime(store_url, clock=clock, embedded_projections=False) as runtime:
        length = _host_history(runtime)
        yield Lagging(runtime, length, _counting_reads(runtime))


def test_replacing_every_read_model_reads_the_log_once_and_leaves_the_lagging_ones_unread(
    lagging: Lagging,
) -> None:
    assert lagging.runtime.rebuild_projections() == lagging.length

    assert sum(lagging.reads) == lagging.length
    queue = WorkflowStore(lagging.runtime).follow_up_queue("run-lagging")
    assert queue is not None
    assert len(queue.follow_ups) == 20


def test_a_compared_rebuild_catches_the_lagging_read_models_up_in_one_pass(
    lagging: Lagging,
) -> None:
    outcomes = lagging.runtime.rebuild_blue_green()

    # The build reads the log once and the live models' catch-up once, for all of them.
    assert sum(lagging.reads) == 2 * lagging.length
    assert {outcome.compared for outcome in outcomes} == {"rows"}
    assert all(outcome.equal for outcome in outcomes)


def test_pages_cut_short_by_their_time_limit_read_each_event_once(lagging: Lagging) -> None:
    # No time at all: every page applies one event of the entries it read.
    lagging.runtime.projector.page_seconds = 0.0

    lagging.runtime.catch_up()

    assert sum(lagging.reads) == lagging.length
    queue = WorkflowStore(lagging.runtime).follow_up_queue("run-lagging")
    assert queue is not None
    assert len(queue.follow_ups) == 20
