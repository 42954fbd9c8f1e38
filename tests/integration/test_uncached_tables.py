"""A table marked ``cached=False`` (``Table.cached``) keeps no rows in the projector's row
cache, and its projection never reads one back while projecting; a projection that did
would read it from the store, in a rebuild as live, and get the rows a cached table gives."""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator

import pytest
from eventsourcing.persistence import StoredEvent

from runledger.domain.follow_ups import FollowUp
from runledger.domain.records import ViewerDeltas
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views import rebuild
from runledger.infrastructure.views.projector import ProjectionRunner
from runledger.projections import follow_up_queue
from runledger.projections.base import Key, Row, Table
from runledger.projections.follow_up_queue import FollowUpQueueProjection
from runledger.projections.settings import CHANGES
from runledger.projections.viewer_deltas import REVISIONS

FOLLOW_UPS = 40


def history() -> Iterator[list[StoredEvent]]:
    generator = HistoryGenerator(prefix="uncached")
    yield generator.run_events(FOLLOW_UPS)
    yield from generator.settings_events("uncached-run-9", 30)


def projected(url: str, *, live: bool, page_size: int | None = None) -> Iterator[StoreRuntime]:
    with open_runtime(url, embedded_projections=live) as runtime:
        if page_size is not None:
            runtime.projector.page_size = page_size
        for batch in history():
            runtime.storage.events.insert_events(batch)
        runtime.catch_up()
        yield runtime


def test_the_viewer_revisions_and_the_settings_changes_are_not_cached() -> None:
    assert not REVISIONS.cached
    assert not CHANGES.cached


def test_no_projection_reads_an_uncached_table_while_projecting(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads: Counter[str] = Counter()
    cached = ProjectionRunner.cached

    def counting(self: ProjectionRunner, table: Table, key: Key) -> Row | None:
        reads[table.name] += 1
        return cached(self, table, key)

    monkeypatch.setattr(ProjectionRunner, "cached", counting)
    for runtime in projected(store_url, live=True):
        uncached = {
            table.name
            for runner in runtime.projector.runners.values()
            for table in runner.projection.tables
            if not table.cached
        }
        kept = {
            name
            for runner in runtime.projector.runners.values()
            for name, rows in runner._cache.items()
            if rows
        }
        store = WorkflowStore(runtime)
        head = store.viewer_deltas("uncached-run-1", after_revision=0)
        deltas = store.viewer_deltas("uncached-run-1", after_revision=head.retained_from_revision)
        changes = store.settings_scope_at_change("uncached-run-9:$root:1", 30)

    assert uncached == {REVISIONS.name, CHANGES.name}
    assert reads, "the projections read their other tables"
    assert not uncached & set(reads)
    assert not uncached & kept
    # Written all the same: the queries find them.
    assert isinstance(deltas, ViewerDeltas)
    revisions = {delta.presentation_revision for delta in deltas.deltas}
    assert revisions == set(range(deltas.retained_from_revision + 1, deltas.current_revision + 1))
    assert len(revisions) > 10
    assert changes is not None
    assert changes.settings == {"counter": 30}


@pytest.mark.parametrize("live", [True, False], ids=["live", "rebuilt"])
def test_a_projection_that_reads_an_uncached_table_gets_its_rows_from_the_store(
    store_url: str, monkeypatch: pytest.MonkeyPatch, live: bool
) -> None:
    # The follow-up queue reads its follow-ups back (a removal, a message for one): with
    # them uncached, every such read goes to the store, in a rebuild too, where a miss in
    # the cache of a table it keeps whole means "no row".
    uncached = dataclasses.replace(follow_up_queue.FOLLOW_UPS, cached=False)
    # A page an event: every read of a row an earlier event wrote misses the page's own.
    monkeypatch.setattr(rebuild, "BUILD_PAGE_SIZE", 1)
    monkeypatch.setattr(follow_up_queue, "FOLLOW_UPS", uncached)
    monkeypatch.setattr(FollowUpQueueProjection, "tables", (follow_up_queue.RUNS, uncached))
    removed = sum(event.topic == FollowUp.Removed.TOPIC for batch in history() for event in batch)
    for runtime in projected(store_url, live=True, page_size=1):
        if not live:
            runtime.rebuild_projections(["follow_up_queue"])
        runner = runtime.projector.runner("follow_up_queue")
        assert not runner._cache.get(uncached.name)
        queue = WorkflowStore(runtime).follow_up_queue("uncached-run-1")

    assert queue is not None
    states = Counter(item.state for item in queue.follow_ups)
    assert removed > 0
    assert states == {"removed": removed, "queued": FOLLOW_UPS - removed}
