"""A process that finds another one projected past it replays those events into the rows it
holds instead of dropping them (``ProjectionRunner.fast_forward``).

Only two stores on one database have another process to skip: a SQLite file and PostgreSQL
(a memory store has no second process). The rows must stay those a rebuild from the log
gives, and a replay that would need a row the process does not hold must drop the cache as
before, never read the row the other process left in the store.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.projector import ProjectionRunner
from tests.integration.conftest import every_process_projects
from tests.integration.test_postgres_gaps import Writer
from tests.integration.test_same_commit_views import digests, queue_as_session
from tests.support.clock import FakeClock

QUEUE_PROJECTIONS = {"follow_up_queue", "runs", "session_outbox", "viewer_deltas"}
"""The projections whose rows a queued follow-up changes."""


@contextmanager
def two_processes(url: str) -> Iterator[tuple[StoreRuntime, WorkflowStore, WorkflowStore]]:
    """A writer and another process on one store, both projecting (on PostgreSQL they
    would elect one otherwise); the writer contended (it lost a page to the other process,
    so its catch-ups skip what the other projected)."""
    url = every_process_projects(url)
    with (
        open_runtime(url, clock=FakeClock()) as writer,
        open_runtime(url, clock=FakeClock()) as other,
    ):
        store, others = WorkflowStore(writer), WorkflowStore(other)
        store.create_run("run-1", workflow_name="echo", input={})
        store.bind_origin_session("run-1", "session-1")
        queue_as_session(store, "run-1", "mine-0")
        others.create_run("run-2", workflow_name="echo", input={})
        others.bind_origin_session("run-2", "session-1")
        store.follow_up_queue("run-1")
        assert writer.projector.contended
        # Losing that page dropped the writer's rows; its next command holds run-1's again.
        queue_as_session(store, "run-1", "mine-1")
        # The other process is current, so its commands write their views with their events.
        others.follow_up_queue("run-1")
        yield writer, store, others


def watched(
    monkeypatch: pytest.MonkeyPatch, runtime: StoreRuntime
) -> tuple[Counter[Any], list[Any]]:
    """How each projection's fast-forwards ended, and the rows its runners fetched."""
    outcomes: Counter[Any] = Counter()
    fetched: list[Any] = []
    fast_forward = ProjectionRunner.fast_forward
    own = set(map(id, runtime.projector.runners.values()))

    def counted(runner: ProjectionRunner, events: Any, to: int) -> bool:
        kept = fast_forward(runner, events, to)
        if id(runner) in own:
            outcomes[runner.name, kept] += 1
        return kept

    fetch = runtime.views.fetch

    def fetching(table: Any, key: Any, slot: Any) -> Any:
        fetched.append((table.name, key))
        return fetch(table, key, slot)

    monkeypatch.setattr(ProjectionRunner, "fast_forward", counted)
    monkeypatch.setattr(runtime.views, "fetch", fetching)
    return outcomes, fetched


def test_rows_another_process_changed_from_held_rows_are_replayed_not_fetched(
    durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with two_processes(durable_url) as (writer, store, others):
        queue_as_session(others, "run-1", "theirs-1")
        queue_as_session(others, "run-1", "theirs-2")
        outcomes, fetched = watched(monkeypatch, writer)

        store.follow_up_queue("run-1")
        mine = queue_as_session(store, "run-1", "mine-2")
        queued = store.follow_up_queue("run-1")

        assert {name for (name, kept) in outcomes if kept} >= QUEUE_PROJECTIONS
        assert not any(kept is False for (name, kept) in outcomes if name in QUEUE_PROJECTIONS)
        # The writer's own command found every row of run-1 where the replay left it.
        assert not [row for row in fetched if "run-1" in str(row) or "session-1" in str(row)]
        assert queued is not None
        assert [item.prompt for item in queued.follow_ups] == [
            "mine-0",
            "mine-1",
            "theirs-1",
            "theirs-2",
            "mine-2",
        ]
        assert queued.follow_ups[-1].follow_up_id == mine
        shown = digests(writer)
        assert shown == digests(others._runtime)
        writer.rebuild_projections()
        assert digests(writer) == shown


def test_a_replay_that_reads_a_row_not_held_drops_the_cache_instead(
    durable_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_runtime(durable_url, clock=FakeClock()) as earlier:
        WorkflowStore(earlier).create_run("run-3", workflow_name="echo", input={})
        WorkflowStore(earlier).bind_origin_session("run-3", "session-1")
    with two_processes(durable_url) as (writer, store, others):
        # run-3's rows were never read here (a replay of its creation would have made
        # them): its follow-ups cannot be replayed from what the writer holds.
        queue_as_session(others, "run-3", "theirs-1")
        queue_as_session(others, "run-3", "theirs-2")
        outcomes, fetched = watched(monkeypatch, writer)

        store.follow_up_queue("run-1")
        queue_as_session(store, "run-1", "mine-2")
        theirs = store.follow_up_queue("run-3")

        # Queueing reads the run's viewer row and its run row, which only the store holds.
        dropped = {name for (name, kept) in outcomes if not kept}
        assert dropped >= {"runs", "viewer_deltas"}
        assert not any(kept for (name, kept) in outcomes if name in dropped)
        # Dropped: the writer's next command read run-1's rows from the store again.
        assert any("run-1" in str(row) for row in fetched)
        assert theirs is not None
        assert [item.prompt for item in theirs.follow_ups] == ["theirs-1", "theirs-2"]
        shown = digests(writer)
        assert shown == digests(others._runtime)
        writer.rebuild_projections()
        assert digests(writer) == shown


@pytest.mark.postgres
def test_a_hole_below_what_others_projected_does_not_cut_the_replay_short(
    postgres_store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A rolled-back insert leaves a hole; another writer is open when the replay reads past
    # it. A follower stops at such a hole, but everything up to what the other process
    # projected is settled: a replay cut there would skip their events and leave the rows
    # held here as they were, and the writer's next command would build on them.
    with two_processes(postgres_store_url) as (writer, store, others):
        loser = Writer(postgres_store_url)
        loser.insert()
        loser.roll_back()
        queue_as_session(others, "run-1", "theirs-1")
        queue_as_session(others, "run-1", "theirs-2")
        others.follow_up_queue("run-1")
        outcomes, _ = watched(monkeypatch, writer)
        open_writer = Writer(postgres_store_url)
        try:
            writer.catch_up()
        finally:
            open_writer.roll_back()
        queue_as_session(store, "run-1", "mine-2")
        queued = store.follow_up_queue("run-1")

        assert outcomes["viewer_deltas", True] == 1
        assert queued is not None
        assert [item.prompt for item in queued.follow_ups][-3:] == [
            "theirs-1",
            "theirs-2",
            "mine-2",
        ]
        shown = digests(writer)
        assert shown == digests(others._runtime)
        writer.rebuild_projections()
        assert digests(writer) == shown
