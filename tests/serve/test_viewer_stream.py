"""``GET /runs/{id}/viewer`` streams each new presentation revision as a server-sent event."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import jsonpatch
import psycopg
import pytest

from runledger.infrastructure.serve.app import Server
from runledger.infrastructure.serve.notifications import CommitNotifications
from runledger.infrastructure.store import open_store
from tests.serve.conftest import (
    EventStream,
    Served,
    SharedHost,
    queue_follow_up,
    serving,
    started_run,
)

FOLLOW_UPS = ("inspector", "follow-ups")


def follow_up_ids(event_data: dict[str, Any]) -> list[str]:
    """The follow-up ids the revision's follow-ups inspector delta shows."""
    [delta] = [d for d in event_data["deltas"] if (d["target_type"], d["target_key"]) == FOLLOW_UPS]
    [queue] = [op["value"] for op in delta["patch"] if op["path"] == "/followUpQueue"]
    return [item["followUpId"] for item in queue["items"]]


def test_a_queued_follow_up_arrives_as_the_next_revision(served: Served) -> None:
    started_run(served.api)
    revision = served.api.ok("viewer_deltas", "run-1", after_revision=1)["current_revision"]

    with served.api.client.stream("GET", f"/runs/run-1/viewer?after_revision={revision}") as r:
        stream = EventStream(r)
        stream.wait_open()
        queued = queue_follow_up(served.api, "run-1", "request-1")
        event = stream.next()

    assert r.headers["content-type"].startswith("text/event-stream")
    assert (event.name, event.id) == ("revision", str(revision + 1))
    assert event.data["presentation_revision"] == revision + 1
    assert follow_up_ids(event.data) == [queued["follow_up"]["follow_up_id"]]


def test_a_commit_of_another_store_on_the_same_database_arrives_too(
    served_durable: Served, durable_serve_url: str
) -> None:
    served = served_durable
    started_run(served.api)

    with served.api.client.stream("GET", "/runs/run-1/viewer?after_revision=2") as r:
        stream = EventStream(r)
        stream.wait_open()
        with open_store(durable_serve_url) as other:
            other.pause_run("run-1", status_detail="from elsewhere")
        event = stream.next()

    assert (event.name, event.id) == ("revision", "3")
    [graph] = [d for d in event.data["deltas"] if d["target_type"] == "graph"]
    assert {"op": "add", "path": "/state/paused", "value": True} in graph["patch"]


@pytest.fixture
def served_postgres(shared_host: SharedHost, postgres_store_url: str) -> Iterator[Served]:
    yield from serving(shared_host, postgres_store_url)


LISTENERS = "SELECT count(*) FROM pg_stat_activity WHERE datname = %s AND query ILIKE 'LISTEN %%'"


@pytest.mark.postgres
def test_on_postgresql_the_server_listens_for_other_processes_commits(
    served_postgres: Served, shared_host: SharedHost, postgres_store_url: str
) -> None:
    server: Server = shared_host.app.state.server
    notifications = server.notifications

    assert notifications is not None
    assert notifications.listening.wait(5)
    database = postgres_store_url.rsplit("/", 1)[-1]
    with psycopg.connect(postgres_store_url, autocommit=True) as admin:
        row = admin.execute(LISTENERS, (database,)).fetchone()
    assert row is not None
    assert row[0] >= 1


def test_a_stream_without_a_cursor_starts_with_snapshot_required(served_memory: Served) -> None:
    started_run(served_memory.api)

    with served_memory.api.client.stream("GET", "/runs/run-1/viewer") as r:
        stream = EventStream(r)
        event = stream.next()
        queue_follow_up(served_memory.api, "run-1", "request-1")
        after = stream.next()

    assert (event.name, event.id) == ("snapshot_required", "2")
    assert event.data == {"current_revision": 2, "retained_from_revision": 1}
    assert (after.name, after.id) == ("revision", "3")


def test_last_event_id_resumes_after_that_revision(served_memory: Served) -> None:
    started_run(served_memory.api)
    queue_follow_up(served_memory.api, "run-1", "request-1")
    queue_follow_up(served_memory.api, "run-1", "request-2")

    with served_memory.api.client.stream(
        "GET", "/runs/run-1/viewer?after_revision=0", headers={"Last-Event-ID": "3"}
    ) as r:
        event = EventStream(r).next()

    assert (event.name, event.id) == ("revision", "4")
    assert len(follow_up_ids(event.data)) == 2


def test_a_cursor_out_of_retention_gets_snapshot_required(served_memory: Served) -> None:
    started_run(served_memory.api)
    store = served_memory.store
    for n in range(260):
        store.publish_update("run-1", attempt_id="a-1", update_type="step", key="k", data=n)
    current = store.viewer_deltas("run-1", after_revision=0).current_revision

    with served_memory.api.client.stream("GET", "/runs/run-1/viewer?after_revision=1") as r:
        event = EventStream(r).next()

    assert (event.name, event.id) == ("snapshot_required", str(current))
    assert event.data["retained_from_revision"] == current - 255


def test_every_client_of_a_run_gets_each_revision(served_memory: Served) -> None:
    started_run(served_memory.api)
    client = served_memory.api.client

    with (
        client.stream("GET", "/runs/run-1/viewer?after_revision=2") as first,
        client.stream("GET", "/runs/run-1/viewer?after_revision=2") as second,
    ):
        streams = [EventStream(first), EventStream(second)]
        for stream in streams:
            stream.wait_open()
        queue_follow_up(served_memory.api, "run-1", "request-1")
        queue_follow_up(served_memory.api, "run-1", "request-2")
        seen = [[stream.next().id, stream.next().id] for stream in streams]

    assert seen == [["3", "4"], ["3", "4"]]


def test_an_unknown_run_or_a_bad_cursor_is_refused_before_streaming(
    served_memory: Served,
) -> None:
    started_run(served_memory.api)
    client = served_memory.api.client

    unknown = client.get("/runs/run-unknown/viewer?after_revision=1")
    bad = client.get("/runs/run-1/viewer?after_revision=-1")

    assert (unknown.status_code, unknown.json()["code"]) == (404, "run.not-found")
    assert (bad.status_code, bad.json()["code"]) == (422, "viewer.invalid-cursor")


# -- the snapshot a viewer starts from -------------------------------------------------------


def test_a_snapshot_with_the_deltas_after_it_is_the_later_snapshot(served: Served) -> None:
    api = served.api
    started_run(api)
    queue_follow_up(api, "run-1", "request-1")
    before = api.client.get("/runs/run-1/viewer/snapshot").json()
    queue_follow_up(api, "run-1", "request-2")
    api.ok("finish_run", "run-1", status="failed", error="boom")

    deltas = api.ok("viewer_deltas", "run-1", after_revision=before["revision"])["deltas"]
    documents = before["targets"]
    for delta in deltas:
        key = f"{delta['target_type']}/{delta['target_key']}"
        if key in ("inspector/follow-ups", "inspector/settings"):
            documents[key] = jsonpatch.apply_patch(documents[key], delta["patch"])
    after = api.client.get("/runs/run-1/viewer/snapshot").json()

    assert after["revision"] == before["revision"] + len(
        {d["presentation_revision"] for d in deltas}
    )
    for key in ("inspector/follow-ups", "inspector/settings"):
        assert documents[key] == after["targets"][key], key
    assert [
        item["state"] for item in after["targets"]["inspector/follow-ups"]["followUpQueue"]["items"]
    ] == ["cancelled", "cancelled"]
    assert after["targets"]["graph/"]["state"]["status"] == "failed"
    assert [item["type"] for item in after["targets"]["timeline/trace:tail"]["items"]] == [
        "run.created",
        "run.session-bound",
        "run.finished",
    ]


def test_a_snapshot_of_an_unknown_run_is_404(served_memory: Served) -> None:
    response = served_memory.api.client.get("/runs/run-unknown/viewer/snapshot")

    assert response.status_code == 404


@pytest.mark.parametrize("digits", [20, 4300, 5000])
@pytest.mark.parametrize("where", ["last-event-id", "after_revision"])
def test_a_cursor_with_too_many_digits_is_422_not_a_server_error(
    served: Served, where: str, digits: int
) -> None:
    started_run(served.api)
    cursor = "9" * digits
    if where == "last-event-id":
        response = served.api.client.get("/runs/run-1/viewer", headers={"Last-Event-ID": cursor})
    else:
        response = served.api.client.get(f"/runs/run-1/viewer?after_revision={cursor}")

    assert (response.status_code, response.json()) == (
        422,
        {
            "code": "viewer.invalid-cursor",
            "message": "Viewer cursor must be a non-negative integer",
        },
    )


def test_a_cursor_of_nineteen_digits_is_a_cursor_beyond_the_log(served_memory: Served) -> None:
    started_run(served_memory.api)
    client = served_memory.api.client

    with client.stream("GET", f"/runs/run-1/viewer?after_revision={'9' * 19}") as response:
        stream = EventStream(response)
        first = stream.next()

    assert (response.status_code, first.name) == (200, "snapshot_required")


@pytest.mark.postgres
def test_each_new_listen_session_wakes_the_streams_once(postgres_store_url: str) -> None:
    # Commits made before the LISTEN (or while its connection was down) sent their NOTIFY to
    # nobody: the streams must look once when a session starts, not wait for the next commit.
    woken = threading.Semaphore(0)
    channel = "runledger_test_serve_listen"
    notifications = CommitNotifications(postgres_store_url, channel, woken.release)
    notifications.start()
    try:
        assert woken.acquire(timeout=10), "the first session did not wake the streams"
        with psycopg.connect(postgres_store_url, autocommit=True) as admin:
            admin.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE query = %s AND pid <> pg_backend_pid()",
                (f'LISTEN "{channel}"',),
            )
        assert woken.acquire(timeout=20), "the session after a lost connection did not"
    finally:
        notifications.stop()
