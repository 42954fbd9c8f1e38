"""A WorkflowError answers 404, 409, 422 or 503 with ``{"code", "message"}``; so do bad
requests and unknown routes."""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import httpx
import pytest

from runledger.domain import errors
from runledger.infrastructure.serve.app import MAX_BODY_BYTES
from runledger.infrastructure.serve.errors import status_of_code
from runledger.infrastructure.serve.routes import ROUTES
from tests.serve.conftest import Api, Served, SharedHost, queue_follow_up, serving, started_run


def error_of(response) -> tuple[int, str, str]:
    body = response.json()
    assert set(body) == {"code", "message"}
    return response.status_code, body["code"], body["message"]


# -- the store's errors, on every backend ----------------------------------------------------


def test_an_unknown_run_is_404(served: Served) -> None:
    assert error_of(served.api.call("get_run", "run-unknown")) == (
        404,
        "run.not-found",
        "Workflow run not found: run-unknown",
    )


RUN_READS = {
    route.call: {"start": 0, "limit": 10} if route.requires else {}
    for route in ROUTES
    if route.method == "GET" and "{run_id}" in route.path
}
RUN_READS["viewer_deltas"] = {"after_revision": 1}
UNKNOWN_RUN = (404, "run.not-found", "Workflow run not found: run-unknown")


def read_unknown_run(api: Api, call: str) -> httpx.Response:
    if call == "follow_up_queue_range":  # the row picked by its query on the shared path
        return api.client.get("/runs/run-unknown/follow-up-queue", params=RUN_READS[call])
    return api.call(call, "run-unknown", **RUN_READS[call])


def test_every_read_of_an_unknown_run_is_404_run_not_found(served: Served) -> None:
    client = served.api.client
    answers = {call: error_of(read_unknown_run(served.api, call)) for call in RUN_READS}
    answers["event_log"] = error_of(client.get("/events", params={"run_id": "run-unknown"}))
    for path in ("/runs/run-unknown/viewer", "/runs/run-unknown/viewer/snapshot"):
        answers[path] = error_of(client.get(path))

    assert answers == dict.fromkeys(answers, UNKNOWN_RUN)
    assert {"terminal_data", "follow_up_queue", "session_segments"} <= set(answers)


def test_a_known_run_with_nothing_to_show_still_answers_null_or_an_empty_list(
    served: Served,
) -> None:
    api = served.api
    api.ok("create_run", run_id="run-1", workflow_name="echo", input={})

    answers = {
        "terminal_data": api.ok("terminal_data", "run-1"),  # not ended
        "follow_up_queue": api.ok("follow_up_queue", "run-1"),  # no origin session
        "settings_scopes": api.ok("settings_scopes", "run-1"),
        "session_segments": api.ok("session_segments", "run-1"),
        "event_log": api.ok("event_log", run_id="run-1", after=10_000),
    }

    assert answers == {
        "terminal_data": None,
        "follow_up_queue": None,
        "settings_scopes": [],
        "session_segments": [],
        "event_log": [],
    }
    assert served.store.terminal_data("run-unknown") is None, "the Python API answers None"


def test_a_command_on_an_unknown_run_is_404_with_upstreams_message(served: Served) -> None:
    response = served.api.call("pause_run", "run-unknown")

    assert error_of(response) == (404, "run.not-found", "Workflow run is missing: run-unknown")


def test_creations_answer_201_and_the_openapi_document_says_so(served_memory: Served) -> None:
    client = served_memory.api.client
    created = client.post("/runs", json={"run_id": "run-1", "workflow_name": "e", "input": {}})
    paused = client.post("/runs/run-1/pause", json={})
    document = client.get("/openapi.json").json()

    assert (created.status_code, created.json()["run_id"]) == (201, "run-1")
    assert paused.status_code == 200
    assert set(document["paths"]["/runs"]["post"]["responses"]) >= {"201"}
    assert "200" not in document["paths"]["/runs"]["post"]["responses"]
    assert "200" in document["paths"]["/runs/{run_id}/pause"]["post"]["responses"]


def test_creating_a_run_twice_is_409(served: Served) -> None:
    served.api.ok("create_run", run_id="run-1", workflow_name="echo", input={})

    response = served.api.call("create_run", run_id="run-1", workflow_name="echo", input={})

    assert error_of(response) == (409, "run.already-exists", "Workflow run already exists: run-1")


def test_an_empty_prompt_is_422_with_the_upstream_message(served: Served) -> None:
    started_run(served.api)

    response = served.api.call(
        "queue_follow_up",
        "run-1",
        request_id="request-1",
        target_session_id="session-1",
        actor={"type": "session", "id": "session-1"},
        source="chat",
        prompt="   ",
    )

    assert error_of(response) == (
        422,
        "follow-up.empty-prompt",
        "Workflow follow-up prompt must be a non-empty string",
    )
    assert served.api.ok("follow_up_queue", "run-1")["follow_ups"] == []


def test_a_closed_store_is_503_with_retry_after(served_memory: Served) -> None:
    served_memory.runtime.close()

    response = served_memory.api.call("list_runs")

    assert error_of(response) == (503, "store.closed", "The store is closed")
    assert response.headers["retry-after"] == "1"


@pytest.fixture
def exhausted(shared_host: SharedHost, postgres_store_url: str) -> Iterator[tuple[Served, str]]:
    """A server on PostgreSQL whose one pooled connection the test holds; its URL has a
    password (trust authentication ignores it)."""
    parts = urlsplit(postgres_store_url)
    secret = "pg-secret-never-shown"
    netloc = f"{parts.username}:{secret}@{parts.hostname}:{parts.port}"
    url = urlunsplit(
        parts._replace(netloc=netloc, query="pool_size=1&max_overflow=0&pool_timeout=0.3")
    )
    for served in serving(shared_host, url):
        yield served, secret


@pytest.mark.postgres
def test_an_unavailable_storage_is_503_with_retry_after_and_no_password(
    exhausted: tuple[Served, str],
) -> None:
    served, secret = exhausted
    datastore = served.runtime.storage.datastore  # type: ignore[attr-defined]

    with datastore.get_connection():
        response = served.api.call("get_run", "run-1")

    status, code, message = error_of(response)
    assert (status, code, response.headers["retry-after"]) == (503, "store.unavailable", "1")
    assert "pool exhausted" in message
    assert secret not in response.text
    assert served.api.call("get_run", "run-1").status_code == 404, "it recovers by itself"


# -- requests that do not fit the method -----------------------------------------------------


def test_a_body_of_the_wrong_type_is_422_naming_the_field(served_memory: Served) -> None:
    started_run(served_memory.api)

    response = served_memory.api.call(
        "queue_follow_up",
        "run-1",
        request_id="request-1",
        target_session_id="session-1",
        actor={"type": "session", "id": "session-1"},
        source="chat",
        prompt=42,
    )

    status, code, message = error_of(response)
    assert (status, code) == (422, "request.invalid")
    assert "body.prompt" in message
    assert served_memory.api.ok("follow_up_queue", "run-1")["follow_ups"] == []


def test_an_unknown_body_field_is_422_rather_than_ignored(served_memory: Served) -> None:
    started_run(served_memory.api)

    response = served_memory.api.call("pause_run", "run-1", status_detial="typo")

    assert error_of(response)[:2] == (422, "request.invalid")
    assert "status_detial" in response.json()["message"]


def test_a_body_that_is_not_json_is_422(served_memory: Served) -> None:
    response = served_memory.api.client.post("/runs", content=b"{not json")

    assert error_of(response)[:2] == (422, "request.invalid")


def test_a_query_value_that_is_not_a_number_is_422(served_memory: Served) -> None:
    response = served_memory.api.call("list_runs", limit="many")

    assert error_of(response)[:2] == (422, "request.invalid")
    assert "query.limit" in response.json()["message"]


def test_an_unknown_actor_type_is_422(served_memory: Served) -> None:
    started_run(served_memory.api)

    response = served_memory.api.call(
        "queue_follow_up",
        "run-1",
        request_id="request-1",
        target_session_id="session-1",
        actor={"type": "robot", "id": "r"},
        source="chat",
        prompt="hi",
    )

    assert response.status_code == 422


def test_a_body_beyond_the_limit_is_413_and_writes_nothing(served_memory: Served) -> None:
    started_run(served_memory.api)
    body = b'{"status_detail": "' + b"x" * MAX_BODY_BYTES + b'"}'

    response = served_memory.api.client.post("/runs/run-1/pause", content=body)

    assert error_of(response)[:2] == (413, "request.too-large")
    assert served_memory.api.ok("get_run", "run-1")["paused"] is False


def test_an_unknown_route_is_404_and_a_wrong_method_405(served_memory: Served) -> None:
    assert error_of(served_memory.api.client.get("/nowhere"))[:2] == (404, "route.not-found")
    assert error_of(served_memory.api.client.delete("/runs"))[:2] == (
        405,
        "route.method-not-allowed",
    )


def test_a_follow_up_after_the_run_ended_is_409(served_memory: Served) -> None:
    started_run(served_memory.api)
    served_memory.api.ok("finish_run", "run-1", status="completed")

    response = served_memory.api.call(
        "queue_follow_up",
        "run-1",
        request_id="request-1",
        target_session_id="session-1",
        actor={"type": "session", "id": "session-1"},
        source="chat",
        prompt="hi",
    )

    assert error_of(response)[:2] == (409, "run.not-accepting-changes")


def test_a_reused_request_id_with_other_content_is_409(served_memory: Served) -> None:
    started_run(served_memory.api)
    queue_follow_up(served_memory.api, "run-1", "request-1", "first")

    response = served_memory.api.call(
        "queue_follow_up",
        "run-1",
        request_id="request-1",
        target_session_id="session-1",
        actor={"type": "session", "id": "session-1"},
        source="chat",
        prompt="other",
    )

    assert error_of(response)[:2] == (409, "follow-up.request-reused")


# -- the classification itself ---------------------------------------------------------------


def every_error_class() -> list[type[errors.WorkflowError]]:
    return [
        value
        for _, value in inspect.getmembers(errors, inspect.isclass)
        if issubclass(value, errors.WorkflowError)
    ]


@pytest.mark.parametrize("error", every_error_class(), ids=lambda error: error.code)
def test_every_error_code_has_an_http_status(error: type[errors.WorkflowError]) -> None:
    assert status_of_code(error.code) in {404, 409, 422, 500, 503}


@pytest.mark.parametrize(
    ("code", "status"),
    [
        ("store.unavailable", 503),
        ("run.not-found", 404),
        ("session.segment-missing", 404),
        ("settings.scope-not-found", 404),
        ("run.already-exists", 409),
        ("lease.claim-lost", 409),
        ("settings.stale", 409),
        ("update.too-many", 409),
        ("follow-up.empty-prompt", 422),
        ("follow-up.prompt-too-large", 422),
        ("json.too-deep", 422),
        ("run.invalid-id", 422),
        ("session.missing-envelope", 422),
        ("lease.too-long", 422),
        ("store.corrupt-event", 500),
    ],
)
def test_codes_map_by_what_they_mean(code: str, status: int) -> None:
    assert status_of_code(code) == status
