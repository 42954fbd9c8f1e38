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

    assert response.status_code == 200


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
