"""Every write needs the bearer token; reads too, unless the server makes them public."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.serve.conftest import TOKEN, Served, SharedHost, serving, started_run

RUN = {"run_id": "run-1", "workflow_name": "echo", "input": {}}


@pytest.fixture
def public_reads(shared_host: SharedHost) -> Iterator[Served]:
    yield from serving(shared_host, "memory://", public_reads=True)


def test_a_write_without_a_token_is_refused_and_writes_nothing(served: Served) -> None:
    response = served.anonymous.post("/runs", json=RUN)

    assert response.status_code == 401
    assert response.json()["code"] == "auth.required"
    assert response.headers["www-authenticate"] == "Bearer"
    assert served.store.get_run("run-1") is None


def test_a_write_with_a_wrong_token_is_refused(served_memory: Served) -> None:
    for header in (f"Bearer {TOKEN}x", f"Bearer {TOKEN[:-1]}", TOKEN, f"Basic {TOKEN}"):
        response = served_memory.anonymous.post(
            "/runs", json=RUN, headers={"Authorization": header}
        )
        assert response.status_code == 401, header

    assert served_memory.store.get_run("run-1") is None


def test_the_scheme_is_case_insensitive_as_http_says(served_memory: Served) -> None:
    response = served_memory.anonymous.post(
        "/runs", json=RUN, headers={"Authorization": f"bearer {TOKEN}"}
    )

    assert response.status_code == 201


def test_reads_need_the_token_by_default(served_memory: Served) -> None:
    started_run(served_memory.api)

    for path in ("/runs", "/runs/run-1", "/runs/run-1/viewer/snapshot", "/runs/run-1/viewer"):
        assert served_memory.anonymous.get(path).status_code == 401, path


def test_public_reads_open_reads_but_not_writes(public_reads: Served) -> None:
    started_run(public_reads.api)

    assert public_reads.anonymous.get("/runs/run-1").status_code == 200
    assert public_reads.anonymous.post("/runs/run-1/pause", json={}).status_code == 401
    assert public_reads.store.get_run("run-1").paused is False  # type: ignore[union-attr]


def test_the_page_and_the_openapi_document_hold_no_data_and_are_public(
    served_memory: Served,
) -> None:
    assert served_memory.anonymous.get("/").status_code == 200
    assert served_memory.anonymous.get("/openapi.json").status_code == 200


@pytest.fixture
def public_reads_on_each_backend(shared_host: SharedHost, serve_url: str) -> Iterator[Served]:
    yield from serving(shared_host, serve_url, public_reads=True)


def test_under_public_reads_a_read_as_of_a_position_needs_the_token(
    public_reads_on_each_backend: Served,
) -> None:
    served = public_reads_on_each_backend
    started_run(served.api)
    paths = (
        "/runs?as_of=1",
        "/runs/run-1/follow-up-queue?as_of=1",
        "/projections/runs/digest?as_of=1",
        "/runs/run-1/audit?as_of=1",
    )

    anonymous = [served.anonymous.get(path) for path in paths]
    holding = [served.api.client.get(path) for path in paths]

    assert [(a.status_code, a.json()["code"]) for a in anonymous] == [(401, "auth.required")] * 4
    assert [answer.status_code for answer in holding] == [200] * 4
    assert served.anonymous.get("/runs").status_code == 200
