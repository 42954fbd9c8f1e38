"""Read-model digests: the same log gives the same digest on every backend, and a rebuild
gives the digest the model had.

The history is a generated one (``HistoryGenerator``: runs with progress, follow-ups queued,
removed and cancelled by failed endings, terminal messages sent and their turns), written
straight into the log, then projected; the rich command scenario of
``test_read_model_rebuild`` (continuations, restarts, settings) is compared there too.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runledger.domain.values import Actor
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, default_projections, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views import rebuild
from runledger.infrastructure.views.digest import view_digest
from runledger.infrastructure.views.projector import Projector

EVENTS = 1_500


def generated(url: str) -> StoreRuntime:
    """A store at ``url`` holding the generated history, every read model caught up."""
    runtime = open_runtime(url)
    for batch in HistoryGenerator(seed=11, prefix="digest").batches(EVENTS, follow_ups_per_run=12):
        runtime.storage.events.insert_events(batch)
    runtime.catch_up()
    return runtime


def digests(runtime: StoreRuntime) -> dict[str, str]:
    store = WorkflowStore(runtime)
    return {name: store.read_model_digest(name) for name in store.projection_names()}


@pytest.fixture(scope="module")
def reference() -> dict[str, str]:
    """The digests of the generated history on memory."""
    runtime = generated("memory://")
    try:
        return digests(runtime)
    finally:
        runtime.close()


@pytest.fixture
def history(store_url: str) -> Iterator[StoreRuntime]:
    runtime = generated(store_url)
    try:
        yield runtime
    finally:
        runtime.close()


def test_the_generated_history_gives_the_same_digests_on_every_backend(
    history: StoreRuntime, reference: dict[str, str]
) -> None:
    assert digests(history) == reference


def test_a_full_rebuild_gives_the_same_digests(
    history: StoreRuntime, reference: dict[str, str]
) -> None:
    history.rebuild_projections()

    assert digests(history) == reference


def test_a_digest_names_the_projection_and_its_version(history: StoreRuntime) -> None:
    found = digests(history)

    assert len(set(found.values())) == len(found), "every read model has a digest of its own"
    assert all(len(digest) == 64 and int(digest, 16) >= 0 for digest in found.values())


def test_a_changed_row_changes_the_digest(history: StoreRuntime) -> None:
    before = digests(history)
    store = WorkflowStore(history)
    store.create_run("digest-extra", workflow_name="review", input={})

    after = digests(history)

    assert after["runs"] != before["runs"]
    assert after["settings"] == before["settings"]


@pytest.mark.parametrize(
    ("bound", "limit"),
    [
        ("BUILD_CACHE_ROWS", 10),
        # Less than a row of each table's JSON: the heaviest tables give rows up first.
        ("BUILD_CACHE_BYTES", 256),
    ],
)
def test_a_rebuild_through_a_tiny_row_cache_gives_the_same_digests(
    history: StoreRuntime,
    reference: dict[str, str],
    monkeypatch: pytest.MonkeyPatch,
    bound: str,
    limit: int,
) -> None:
    # Past its cache a build asks the view store for rows it evicted, as on a big store: in
    # pages of 50 events, the next pages ask for the rows the cache gave up.
    monkeypatch.setattr(rebuild, bound, limit)
    monkeypatch.setattr(rebuild, "BUILD_PAGE_SIZE", 50)

    history.rebuild_projections()

    assert digests(history) == reference


def test_a_catch_up_through_a_tiny_byte_bound_gives_the_same_digests(
    store_url: str, reference: dict[str, str]
) -> None:
    runtime = open_runtime(store_url, embedded_projections=False)
    try:
        for batch in HistoryGenerator(seed=11, prefix="digest").batches(
            EVENTS, follow_ups_per_run=12
        ):
            runtime.storage.events.insert_events(batch)
        projector = Projector(
            runtime.storage, runtime.views, default_projections(), page_size=50, cache_bytes=4_096
        )
        projector.catch_up()

        held = {name: runner.cached_rows for name, runner in projector.runners.items()}
        found = {
            name: view_digest(runner.projection, runtime.views.reader())
            for name, runner in projector.runners.items()
        }
    finally:
        runtime.close()
    assert found == reference
    # The bound held: no runner kept more than a few of the viewer deltas' 4 kB rows.
    assert held["viewer_deltas"] < 8


def test_a_rebuild_that_comes_back_to_rows_it_gave_up_gives_the_same_digests(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two runs in turns, pages of a few events: past a bound of a row or two, every page
    # needs rows the build gave up.
    runtime = open_runtime(store_url)
    try:
        store = WorkflowStore(runtime)
        for run_id in ("turns-a", "turns-b"):
            store.create_run(run_id, workflow_name="review", input={})
            store.bind_origin_session(run_id, f"{run_id}-session")
        for number in range(12):
            run_id = ("turns-a", "turns-b")[number % 2]
            store.queue_follow_up(
                run_id,
                request_id=f"request-{number}",
                target_session_id=f"{run_id}-session",
                actor=Actor("session", f"{run_id}-session"),
                source="pi-session",
                prompt=f"Follow-up {number}",
            )
        before = digests(runtime)
        monkeypatch.setattr(rebuild, "BUILD_CACHE_BYTES", 256)
        monkeypatch.setattr(rebuild, "BUILD_PAGE_SIZE", 3)

        runtime.rebuild_projections()

        assert digests(runtime) == before
    finally:
        runtime.close()
