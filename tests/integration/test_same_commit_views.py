"""Read models written in the command's own transaction (DESIGN "Write path").

The committing process projects its new events in memory and commits the rows and tracking
with them. These tests pin that this path leaves exactly the rows the log-following path
(catch-up, worker, rebuild) gives for the same history, on memory, a SQLite file and
PostgreSQL; that the events still commit when the views cannot be written with them; and
that concurrent writer processes, each projecting its own commands, end with the views the
log gives.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runledger.domain.ids import follow_up_id_for, follow_up_message_id
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime, default_projections, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.digest import view_digest
from tests.integration.conftest import every_process_projects
from tests.support.clock import FakeClock
from tests.support.postgres import DatabasePool
from tests.support.workers import Op, Outcome, Round, run_race

SOURCE = "workflow-tool"


def play_history(store: WorkflowStore, *, runs: int = 3, follow_ups: int = 6) -> None:
    """Runs that queue, deliver, remove and end (a failure cancels what is queued), one with a
    continuation child: every read model gets rows that later events change."""
    for index in range(runs):
        run_id = f"run-{index}"
        session = f"session-{index % 2}"
        actor = Actor("session", session)
        store.create_run(run_id, workflow_name="echo", input={"index": index})
        store.bind_origin_session(run_id, session)
        store.record_progress(run_id, status="running", current_node="step")
        store.set_presentation_instructions(run_id, f"Present run {index}.")
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
        message_id = follow_up_message_id(ids[0])
        store.report_branch(session, [(message_id, f"entry-{index}")], allowed_ids=[message_id])
        store.remove_follow_up(run_id, ids[1], actor=actor, source=SOURCE)
        # A retried request is adopted, and writes nothing.
        store.queue_follow_up(
            run_id,
            request_id="request-2",
            target_session_id=session,
            actor=actor,
            source=SOURCE,
            prompt=f"Task 2 of run {index}",
        )
        if index % 2:
            store.finish_run(run_id, status="failed", error=f"boom {index}")
        else:
            store.finish_run(run_id, status="completed", final_output={"answer": index})
    store.create_run("run-child", workflow_name="echo", input={}, parent_run_id="run-0")


def queue_as_session(store: WorkflowStore, run_id: str, request_id: str) -> str:
    """Queue a follow-up on ``run_id`` as session-1 would; its id."""
    return store.queue_follow_up(
        run_id,
        request_id=request_id,
        target_session_id="session-1",
        actor=Actor("session", "session-1"),
        source=SOURCE,
        prompt=request_id,
    ).follow_up.follow_up_id


def digests(runtime: StoreRuntime) -> dict[str, str]:
    reader = runtime.views.reader()
    return {p.name: view_digest(p, reader) for p in default_projections()}


def test_views_written_with_the_commands_equal_a_rebuild_from_the_log(
    runtime: StoreRuntime, store: WorkflowStore
) -> None:
    play_history(store)

    assert runtime.stats.read_models_with_events > 0, "no command wrote its read models"
    written_with_commands = digests(runtime)
    runtime.rebuild_projections()

    assert digests(runtime) == written_with_commands


@pytest.fixture
def second_url(durable_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[str]:
    """Another new, empty store on the backend of ``durable_url``."""
    if durable_url.startswith("sqlite:///"):
        yield f"sqlite:///{tmp_path / 'second.db'}"
        return
    databases: DatabasePool = request.getfixturevalue("postgres_databases")
    with databases.lend() as url:
        yield url


def test_views_written_with_the_commands_equal_those_a_worker_projects(
    durable_url: str, second_url: str
) -> None:
    with open_runtime(durable_url, clock=FakeClock()) as embedded:
        play_history(WorkflowStore(embedded))
        assert embedded.stats.read_models_with_events > 0
        written_with_commands = digests(embedded)
    # The same history, committed by a host that does not project, then projected by a
    # worker following the log.
    with open_runtime(second_url, clock=FakeClock(), embedded_projections=False) as host:
        play_history(WorkflowStore(host))
        assert host.stats.read_models_with_events == 0
    with open_runtime(second_url, embedded_projections=False) as worker:
        worker.catch_up()
        assert digests(worker) == written_with_commands


def test_the_events_commit_when_another_process_moved_a_view_meanwhile(
    durable_url: str,
) -> None:
    actor = Actor("session", "session-1")
    with (
        open_runtime(durable_url, clock=FakeClock()) as writer,
        open_runtime(durable_url, embedded_projections=False) as other,
    ):
        store = WorkflowStore(writer)
        store.create_run("run-1", workflow_name="echo", input={})
        store.bind_origin_session("run-1", "session-1")
        written_before = writer.stats.read_models_with_events
        # Another process rebuilds the queue view blue/green and switches to the new slot:
        # the writer's next compare-and-set on its now retired slot fails, inside the
        # command's transaction.
        other.rebuild_projection("follow_up_queue")

        queued = store.queue_follow_up(
            "run-1",
            request_id="request-1",
            target_session_id="session-1",
            actor=actor,
            source=SOURCE,
            prompt="Still recorded",
        )

        assert writer.stats.read_models_with_events == written_before
        assert store.get_follow_up(queued.follow_up.follow_up_id) is not None
        queue = store.follow_up_queue("run-1")
        assert queue is not None
        assert [item.follow_up_id for item in queue.follow_ups] == [queued.follow_up.follow_up_id]
        shown = digests(writer)
        writer.rebuild_projections()
        assert digests(writer) == shown


def test_the_events_commit_when_another_writer_took_the_positions_the_views_expected(
    durable_url: str,
) -> None:
    with (
        open_runtime(durable_url, clock=FakeClock()) as writer,
        open_runtime(durable_url, embedded_projections=False) as other,
    ):
        store = WorkflowStore(writer)
        store.create_run("run-1", workflow_name="echo", input={})
        store.bind_origin_session("run-1", "session-1")
        # The other host's events take the positions the writer's views expect next.
        others = WorkflowStore(other)
        order = skipped_after_other_commits(
            writer, store, lambda attempt: queue_as_session(others, "run-1", f"theirs-{attempt}")
        )

        queued = store.follow_up_queue("run-1")
        assert queued is not None
        assert [item.follow_up_id for item in queued.follow_ups] == order
        shown = digests(writer)
        writer.rebuild_projections()
        assert digests(writer) == shown


SKIP_TRIES = 5


def skipped_after_other_commits(
    writer: StoreRuntime, store: WorkflowStore, other: Callable[[int], str]
) -> list[str]:
    """Queue ``other(attempt)`` (another host's command), then one of ``store`` on ``run-1``,
    until one of the latter commits its events without its read models (the other commit
    took the positions they expected); the follow-up ids both queued, in order. The writer's
    follower, woken by the other commit's NOTIFY, may catch the views up before the next
    command: that command then writes them with its events, and the premise is tried again
    (CI met it once in ~100 runs)."""
    queued: list[str] = []
    for attempt in range(SKIP_TRIES):
        queued.append(other(attempt))
        before = writer.stats.read_models_with_events
        queued.append(queue_as_session(store, "run-1", f"mine-{attempt}"))
        if writer.stats.read_models_with_events == before:
            return queued
    pytest.fail(f"the writer's views were caught up before each of {SKIP_TRIES} commands")


@pytest.mark.parametrize("written_first", [0, 4])
def test_commands_after_views_skipped_on_their_way_still_write_them_with_the_events(
    durable_url: str, written_first: int
) -> None:
    # A writer whose views could not be written with one command's events (the other
    # host's insert took the positions they expected: the other host queues on a run of
    # its own, the writer waits for no lock of it, so nothing catches its views up first)
    # writes them with its events again from its next commands on, across the use at
    # which its statements get prepared (the 5th, with ``written_first`` 4).
    with (
        open_runtime(durable_url, clock=FakeClock()) as writer,
        open_runtime(durable_url, embedded_projections=False) as other,
    ):
        store, others = WorkflowStore(writer), WorkflowStore(other)
        for run_id in ("run-1", "run-2"):
            store.create_run(run_id, workflow_name="echo", input={})
            store.bind_origin_session(run_id, "session-1")
        for number in range(written_first):
            queue_as_session(store, "run-1", f"first-{number}")
        tried = skipped_after_other_commits(
            writer, store, lambda attempt: queue_as_session(others, "run-2", f"other-{attempt}")
        )
        skipped = len(tried) // 2  # every second id is the writer's own, on run-1
        # The writer projects the other host's commit as it hears of it (on PostgreSQL its
        # follower is woken by the NOTIFY): a command or two meeting that catch-up commit
        # their events alone, and the views follow right after.
        settling, writes = 8, 64
        for number in range(settling):
            queue_as_session(store, "run-1", f"settling-{number}")
        before = writer.stats.read_models_with_events

        for number in range(writes):
            queue_as_session(store, "run-1", f"written-{number}")

        assert writer.stats.read_models_with_events == before + writes
        queued = store.follow_up_queue("run-1")
        assert queued is not None
        assert len(queued.follow_ups) == written_first + skipped + settling + writes
        shown = digests(writer)
        writer.rebuild_projections()
        assert digests(writer) == shown


def test_a_process_whose_views_others_project_leaves_its_commits_to_the_follower(
    durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another process projecting the same views wins their pages: once the writer met that,
    # a commit whose views could not go with its events is projected by the writer's
    # follower thread with whatever else arrives, not by the committing thread, which would
    # race the other process for each page (P2 on PostgreSQL: 225-331 commands/s from four
    # processes that did, 622-670/s once they hand over). A query still reads its writes.
    # (On PostgreSQL processes elect one to project by default: here both do.)
    url = every_process_projects(durable_url)
    with (
        open_runtime(url, clock=FakeClock()) as writer,
        open_runtime(url, clock=FakeClock()) as other,
    ):
        store, others = WorkflowStore(writer), WorkflowStore(other)
        for run_id in ("run-1", "run-2"):
            store.create_run(run_id, workflow_name="echo", input={})
            store.bind_origin_session(run_id, "session-1")
        assert not writer.projector.contended
        # The other process writes its views with its events; the writer's catch-up then
        # projects the same page in vain and learns that it is contended.
        queue_as_session(others, "run-2", "other-1")
        store.follow_up_queue("run-1")
        assert writer.projector.contended
        on_main_thread: list[bool] = []
        catch_up = writer.projector.catch_up

        def recorded(*args: Any, **kwargs: Any) -> int:
            on_main_thread.append(threading.current_thread() is threading.main_thread())
            return catch_up(*args, **kwargs)

        monkeypatch.setattr(writer.projector, "catch_up", recorded)
        queue_as_session(others, "run-2", "other-2")
        before = writer.stats.read_models_with_events

        mine = queue_as_session(store, "run-1", "mine")

        assert writer.stats.read_models_with_events == before
        assert True not in on_main_thread
        queued = store.follow_up_queue("run-1")
        assert queued is not None
        assert [item.follow_up_id for item in queued.follow_ups] == [mine]
        assert digests(writer) == digests(other)


def test_writers_taking_turns_on_one_run_write_their_views_with_their_events(
    durable_url: str,
) -> None:
    # Each writer's cached run is stale at its turn: its save conflicts, and it runs again
    # holding the run. On PostgreSQL it then catches its views up to the log's end before
    # its insert, so its events land where its views expect and commit with them (SQLite
    # writers take turns on the file's write lock instead, and catch up after the commit).
    # Both project here (``projecting=every``); elected, the second would commit alone.
    url = every_process_projects(durable_url)
    with (
        open_runtime(url, clock=FakeClock()) as first,
        open_runtime(url, clock=FakeClock()) as second,
    ):
        stores = [WorkflowStore(first), WorkflowStore(second)]
        stores[0].create_run("run-1", workflow_name="echo", input={})
        stores[0].bind_origin_session("run-1", "session-1")
        queue_as_session(stores[1], "run-1", "warm-up")
        before = [first.stats.read_models_with_events, second.stats.read_models_with_events]

        for turn in range(10):
            queue_as_session(stores[turn % 2], "run-1", f"turn-{turn}")

        written = [
            first.stats.read_models_with_events - before[0],
            second.stats.read_models_with_events - before[1],
        ]
        if durable_url.startswith("postgresql"):
            # All but each writer's first turn: the insert of its optimistic attempt, which
            # conflicted, drew a position that stays a hole, and the views expect the next
            # events right after the last projected one. On a loaded machine a writer's
            # follower thread, woken by the other's NOTIFY, may hold the projector just when
            # a turn's step asks for it (the step never waits, see ``SameCommitViews``), and
            # that turn's views catch up after its commit: one such turn is let pass.
            assert all(count in (3, 4) for count in written)
            assert sum(written) >= 7
        queued = stores[0].follow_up_queue("run-1")
        assert queued is not None
        assert len(queued.follow_ups) == 11
        shown = digests(first)
        assert digests(second) == shown
        first.rebuild_projections()
        assert digests(first) == shown


def _queue(run_id: str, session: str, request_id: str) -> Op:
    return {
        "op": "queue",
        "run_id": run_id,
        "request_id": request_id,
        "target_session_id": session,
        "actor": {"type": "session", "id": session},
        "source": SOURCE,
        "prompt": f"{request_id} on {run_id}",
    }


def _failures(outcomes: list[Outcome]) -> list[str]:
    return [o.describe() for o in outcomes if not o.ok]


def test_concurrent_writer_processes_leave_the_views_the_log_gives(durable_url: str) -> None:
    workers, per_worker = 3, 12
    with open_runtime(durable_url) as setup:
        store = WorkflowStore(setup)
        for run_id in ["shared", *(f"own-{w}" for w in range(workers))]:
            store.create_run(run_id, workflow_name="echo", input={})
            store.bind_origin_session(run_id, "session-1")
    # Each process alternates its own run and the shared one, so its commands project in
    # its transaction while the others' commits interleave (gaps, moved positions).
    plan: Round = [
        [
            _queue("shared" if i % 2 else f"own-{worker}", "session-1", f"w{worker}-{i}")
            for i in range(per_worker)
        ]
        for worker in range(workers)
    ]

    race = run_race(durable_url, [plan])

    outcomes = race.round(0)
    assert not _failures(outcomes), "\n".join(_failures(outcomes))
    with open_runtime(durable_url) as observer:
        store = WorkflowStore(observer)
        for outcome in outcomes:
            run_id, request_id = outcome.op["run_id"], outcome.op["request_id"]
            assert store.get_follow_up(follow_up_id_for(run_id, request_id)) is not None
        shared = store.follow_up_queue("shared")
        assert shared is not None
        assert [item.order for item in shared.follow_ups] == list(
            range(1, workers * per_worker // 2 + 1)
        )
        projected = digests(observer)
        observer.rebuild_projections()
        assert digests(observer) == projected
