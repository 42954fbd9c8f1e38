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

from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views import rebuild

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


def test_a_rebuild_through_a_tiny_row_cache_gives_the_same_digests(
    history: StoreRuntime, reference: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past its cache a build asks the view store for rows it evicted, as on a big store.
    monkeypatch.setattr(rebuild, "BUILD_CACHE_ROWS", 10)

    history.rebuild_projections()

    assert digests(history) == reference
