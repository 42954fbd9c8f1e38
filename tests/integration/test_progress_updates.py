"""Progress updates (upstream §3.9 ``publishUpdate``, §7.4): the latest update per (type, key)
is current, at most 1024 of them, in ``RunRecord.updates`` and the viewer's graph and
timeline, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.domain.errors import InvalidUpdateFieldError, RunMissingError, TooManyUpdatesError
from runledger.domain.records import UpdateRecord, ViewerDelta, ViewerDeltas
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import assert_rejected, recording
from tests.support.scenario import RUN, create, running_run


def publish(
    store: WorkflowStore, key: str = "step", data: Any = None, update_type: str = "progress"
) -> UpdateRecord:
    return store.publish_update(
        RUN,
        attempt_id="attempt-1",
        update_type=update_type,
        key=key,
        data={"done": 1} if data is None else data,
    )


def latest(store: WorkflowStore) -> dict[str, ViewerDelta]:
    current = store.viewer_deltas(RUN, after_revision=1).current_revision
    result = store.viewer_deltas(RUN, after_revision=current - 1)
    assert isinstance(result, ViewerDeltas)
    return {delta.target_type: delta for delta in result.deltas}


def graph_updates(store: WorkflowStore) -> list[dict[str, Any]]:
    [value] = [op["value"] for op in latest(store)["graph"].patch if op["path"] == "/state/updates"]
    assert isinstance(value, list)
    return value


def test_a_published_update_is_current_on_the_run(store: WorkflowStore) -> None:
    running_run(store)

    with recording(store) as recorded:
        published = publish(store)

    assert recorded.wire_names == ["run.update-published"]
    run = store.get_run(RUN)
    assert run is not None
    assert run.updates == [published]
    assert (published.update_type, published.key, published.data) == (
        "progress",
        "step",
        {"done": 1},
    )
    assert published.seq == recorded.events[0].version


def test_a_newer_update_of_the_same_type_and_key_replaces_it_and_goes_last(
    store: WorkflowStore,
) -> None:
    running_run(store)
    publish(store, "first")
    publish(store, "second")

    newest = publish(store, "first", {"done": 2})

    run = store.get_run(RUN)
    assert run is not None
    assert [(u.key, u.data) for u in run.updates] == [
        ("second", {"done": 1}),
        ("first", newest.data),
    ]


def test_the_graph_shows_the_current_updates_and_the_timeline_the_publication(
    store: WorkflowStore,
) -> None:
    running_run(store)
    publish(store, "first")

    published = publish(store, "first", {"done": 2})

    [shown] = graph_updates(store)
    assert (shown["updateId"], shown["key"], shown["data"]) == (
        published.update_id,
        "first",
        {"done": 2},
    )
    timeline = latest(store)["timeline"]
    [appended] = [op for op in timeline.patch if op["op"] == "append"]
    assert appended["value"][0]["type"] == "run.update-published"
    assert appended["value"][0]["payload"]["data"] == {"done": 2}


def test_the_graph_shows_only_the_last_256_current_updates(store: WorkflowStore) -> None:
    running_run(store)
    for number in range(300):
        publish(store, f"key-{number}")

    shown = graph_updates(store)

    assert [item["key"] for item in shown] == [f"key-{n}" for n in range(44, 300)]


@pytest.mark.slow
def test_a_run_holds_at_most_1024_current_updates(store: WorkflowStore) -> None:
    running_run(store)
    for number in range(1024):
        publish(store, f"key-{number}")

    assert_rejected(
        store,
        TooManyUpdatesError,
        "workflow run supports at most 1024 current updates",
        publish,
        store,
        "one-more",
    )
    # Replacing a current update does not add one, so it is still accepted.
    assert publish(store, "key-0", {"done": 2}).key == "key-0"


@pytest.mark.parametrize(
    ("field", "arguments"),
    [
        ("attempt ID", {"attempt_id": ""}),
        ("type", {"update_type": None}),
        ("key", {"key": 7}),
    ],
)
def test_an_update_without_its_identity_is_rejected(
    store: WorkflowStore, field: str, arguments: dict[str, Any]
) -> None:
    create(store)
    fields = {"attempt_id": "attempt-1", "update_type": "progress", "key": "k", "data": 1}

    assert_rejected(
        store,
        InvalidUpdateFieldError,
        f"Workflow update {field} must be a non-empty string",
        store.publish_update,
        RUN,
        **{**fields, **arguments},
    )


def test_an_update_of_a_missing_run_is_rejected(store: WorkflowStore) -> None:
    assert_rejected(store, RunMissingError, "Workflow run is missing: run-1", publish, store)
