"""Processes sharing a PostgreSQL store elect one to project what commits alone
(``views.leadership``); the others commit their events alone and wait for it before a query.

Whoever projects, a query shows every commit made before it (its own process's first), the
views stay what a rebuild from the log gives, a leader that goes away hands the lead on, and
a query does not wait for a leader that does not project: it projects itself. SQLite and
memory stores have no election (a SQLite writer projects inside its write lock, and a memory
store has no other process): every store projects there, as with ``projecting=every``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runledger.domain.errors import InvalidStoreParameterError
from runledger.infrastructure import runtime as runtime_module
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.leadership import leadership_key
from tests.integration.test_same_commit_views import digests, queue_as_session
from tests.support.clock import FakeClock
from tests.support.postgres import PostgresServer


@contextmanager
def two_processes(url: str) -> Iterator[tuple[StoreRuntime, StoreRuntime]]:
    """Two stores on one database, opened one after the other (the first leads)."""
    with (
        open_runtime(url, clock=FakeClock()) as first,
        open_runtime(url, clock=FakeClock()) as second,
    ):
        yield first, second


def started(store: WorkflowStore, run_id: str) -> None:
    store.create_run(run_id, workflow_name="echo", input={})
    store.bind_origin_session(run_id, "session-1")


def positions(runtime: StoreRuntime) -> set[int]:
    return {runner.position for runner in runtime.projector.runners.values()}


def requests(store: WorkflowStore, run_id: str) -> list[str]:
    """The request ids of the run's follow-up queue, as a query answers now."""
    queue = store.follow_up_queue(run_id)
    assert queue is not None
    return [follow_up.request_id for follow_up in queue.follow_ups]


def listening(runtime: StoreRuntime) -> bool:
    """Whether the store's election connection LISTENs for commits."""
    leadership = runtime._leadership
    assert leadership is not None
    connection = leadership._listener._connection
    if connection is None or connection.closed:
        return False
    row = connection.execute("SELECT count(*) FROM pg_listening_channels()").fetchone()
    return row is not None and row[0] > 0


def lock_session(runtime: StoreRuntime) -> int | None:
    """The server process of the store's election connection (None while it has none)."""
    leadership = runtime._leadership
    assert leadership is not None
    connection = leadership._listener._connection
    return None if connection is None else int(connection.info.backend_pid)


def wait_until(condition: Callable[[], bool], seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return False


def test_one_process_projects_and_the_other_reads_every_commit_before_its_query(
    postgres_store_url: str,
) -> None:
    with two_processes(postgres_store_url) as (leader, other):
        assert leader.leads_projection
        assert not other.leads_projection
        store, others = WorkflowStore(leader), WorkflowStore(other)
        started(others, "run-2")
        projected_at_start = positions(other)

        for number in range(8):
            queue_as_session(others, "run-2", f"theirs-{number}")
            # Its own write, at once: the leader projected it before the query answered.
            assert requests(others, "run-2")[-1] == f"theirs-{number}"
            if number % 2:
                started(store, f"run-{number}")
                queue_as_session(store, f"run-{number}", f"mine-{number}")
                # Another process's write, too: a query shows every commit before it.
                assert requests(others, f"run-{number}") == [f"mine-{number}"]

        # The other process projected nothing itself and wrote no view with its events.
        assert positions(other) == projected_at_start
        assert other.stats.read_models_with_events == 0
        written = digests(other)
        leader.rebuild_projections()
        assert digests(leader) == written


def test_the_lead_passes_to_another_process_when_the_leader_closes(
    postgres_store_url: str,
) -> None:
    with open_runtime(postgres_store_url, clock=FakeClock()) as first:
        with open_runtime(postgres_store_url, clock=FakeClock()) as passing:
            # The first store opened leads; a later one waits its turn.
            assert first.leads_projection
            assert not passing.leads_projection
        # A store that never led leaves the lead where it is when it closes.
        assert first.leads_projection
        with open_runtime(postgres_store_url, clock=FakeClock()) as second:
            assert not second.leads_projection
            WorkflowStore(second).create_run("run-1", workflow_name="echo", input={})
            first.close()
            assert wait_until(lambda: second.leads_projection), "the lead was not passed on"
            store = WorkflowStore(second)
            store.bind_origin_session("run-1", "session-1")
            before = second.stats.read_models_with_events
            queued: list[str] = []
            # Leading, it writes its views with its events again, once its projector has
            # taken the views as the last leader left them (a catch-up or two).
            while second.stats.read_models_with_events == before and len(queued) < 20:
                queued.append(f"after-the-hand-over-{len(queued)}")
                queue_as_session(store, "run-1", queued[-1])
                time.sleep(0.05)
            assert second.stats.read_models_with_events > before
            assert requests(store, "run-1") == queued


def test_a_leader_whose_session_the_server_ends_hands_the_lead_on(
    postgres_store_url: str, postgres_server: PostgresServer
) -> None:
    with two_processes(postgres_store_url) as (leader, other):
        assert leader.leads_projection
        assert not other.leads_projection
        # Only the leader listens: the others would leave every commit's NOTIFY unread.
        assert listening(leader)
        assert not listening(other)
        session = lock_session(leader)

        postgres_server.connection.execute("SELECT pg_terminate_backend(%s)", (session,))

        # The lock went with the session. Whichever process takes it next (the old leader
        # on a new session, or the other at its next look), one leads, and only it listens.
        def one_leads_anew() -> bool:
            leading = [r for r in (leader, other) if r.leads_projection]
            return len(leading) == 1 and lock_session(leading[0]) not in (None, session)

        assert wait_until(one_leads_anew)
        [new_leader] = [r for r in (leader, other) if r.leads_projection]
        [follower] = [r for r in (leader, other) if r is not new_leader]
        assert listening(new_leader)
        assert not listening(follower)
        store, others = WorkflowStore(leader), WorkflowStore(other)
        started(store, "run-1")
        queue_as_session(store, "run-1", "after-the-fault")
        assert requests(store, "run-1") == ["after-the-fault"]
        assert requests(others, "run-1") == ["after-the-fault"]


def test_a_query_that_finds_the_leader_gone_takes_the_lead_itself(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Followers look for the lead only now and then (here: not within the test); a query
    # whose views stand still bids for it at once, and projects as the new leader.
    monkeypatch.setattr(runtime_module, "IDLE_SECONDS", 60.0)
    monkeypatch.setattr(runtime_module, "LEADER_WAIT_SECONDS", 30.0)
    with two_processes(postgres_store_url) as (leader, second):
        assert leader.leads_projection
        assert not second.leads_projection
        store = WorkflowStore(second)
        started(store, "run-1")
        leader.close()
        queue_as_session(store, "run-1", "after-the-leader-left")

        began = time.monotonic()
        assert requests(store, "run-1") == ["after-the-leader-left"]
        waited = time.monotonic() - began

        assert second.leads_projection
        assert waited < 30.0, "the query waited out its bound instead of taking the lead"


@contextmanager
def projector_held(runtime: StoreRuntime) -> Iterator[None]:
    """The store's projector held by another thread (its lock is the thread's own to take
    again), as a busy follower or catch-up holds it."""
    held = threading.Event()
    release = threading.Event()

    def hold() -> None:
        with runtime.projector.paused():
            held.set()
            release.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    try:
        assert held.wait(5)
        yield
    finally:
        release.set()
        holder.join()


def test_a_query_projects_itself_when_the_leader_does_not_project(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runtime_module, "LEADER_WAIT_SECONDS", 0.3)
    with two_processes(postgres_store_url) as (leader, other):
        others = WorkflowStore(other)
        started(others, "run-1")
        others.follow_up_queue("run-1")
        with projector_held(leader):
            queue_as_session(others, "run-1", "while-the-leader-is-stuck")
            began = time.monotonic()
            answered = requests(others, "run-1")
            waited = time.monotonic() - began

        assert answered == ["while-the-leader-is-stuck"]
        # It waited for the leader, then stopped waiting.
        assert 0.3 <= waited < 5


def test_a_query_asks_the_leader_for_commits_it_left_to_its_follower(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # The leader's follower sleeps on other processes' commits and looks on its own only
    # now and then (here: not within the test). A commit of the leader's own that went
    # without its views (its projector was busy) waited for that look, and every other
    # process's query with it: a prune beside a writer spent 67 of its 85 s so.
    monkeypatch.setattr(runtime_module, "IDLE_SECONDS", 60.0)
    monkeypatch.setattr(runtime_module, "LEADER_WAIT_SECONDS", 30.0)
    with two_processes(postgres_store_url) as (leader, other):
        store, others = WorkflowStore(leader), WorkflowStore(other)
        started(store, "run-1")
        assert requests(others, "run-1") == []
        projected_at_start = positions(other)
        with_events = leader.stats.read_models_with_events
        with projector_held(leader):
            # Busy: the command's views neither go with its events nor right after them.
            queue_as_session(store, "run-1", "left-to-the-follower")
        assert leader.stats.read_models_with_events == with_events

        began = time.monotonic()
        with caplog.at_level("WARNING", logger=runtime_module.__name__):
            answered = requests(others, "run-1")
        waited = time.monotonic() - began

    assert answered == ["left-to-the-follower"]
    # The leader projected it when asked: the query neither waited out its bound nor
    # projected itself.
    assert positions(other) == projected_at_start
    assert not [record for record in caplog.records if "projecting here" in record.message]
    assert waited < 30.0


def both_project(url: str) -> None:
    """Two stores on ``url`` both project: the later one writes its views with its events."""
    with two_processes(url) as (first, second):
        assert first.leads_projection
        assert second.leads_projection
        store = WorkflowStore(second)
        started(store, "run-1")
        before = second.stats.read_models_with_events
        queue_as_session(store, "run-1", "mine")
        assert second.stats.read_models_with_events > before


def test_with_projecting_every_each_process_projects_as_before(postgres_store_url: str) -> None:
    both_project(f"{postgres_store_url}?projecting=every")


def test_a_wrong_projecting_value_is_refused_with_what_it_must_be(
    postgres_store_url: str,
) -> None:
    with pytest.raises(InvalidStoreParameterError) as raised:
        open_runtime(f"{postgres_store_url}?projecting=some")

    assert "projecting='some'" in raised.value.message
    assert "one of elected, every" in raised.value.message


def test_sqlite_and_memory_stores_have_no_election(tmp_path: Path) -> None:
    both_project(f"sqlite:///{tmp_path / 'store.db'}")
    with open_runtime("memory://") as alone:
        assert alone.leads_projection


def test_processes_keeping_other_read_models_elect_apart() -> None:
    all_four = [("runs", 1), ("follow_up_queue", 1), ("session_outbox", 1), ("settings", 1)]

    assert leadership_key("c", all_four) == leadership_key("c", list(reversed(all_four)))
    assert leadership_key("c", all_four) != leadership_key("c", all_four[:3])
    assert leadership_key("c", all_four) != leadership_key("c", [("runs", 2), *all_four[1:]])
    assert leadership_key("c", all_four) != leadership_key("d", all_four)
