"""The runs list (DESIGN ``list_runs``): every run with its status and lineage, in creation
order, keyset-paged and filtered by status, origin session and root run, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.domain.errors import InvalidPageError, UnknownRunCursorError
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import SESSION, create, restart, running_run


def ids(store: WorkflowStore, **filters: Any) -> list[str]:
    return [run.run_id for run in store.list_runs(**filters).runs]


def test_runs_are_listed_in_creation_order_with_their_state(store: WorkflowStore) -> None:
    create(store, "b-run")
    running_run(store, "a-run")
    store.pause_run("a-run", status_detail="paused")

    page = store.list_runs()

    assert [run.run_id for run in page.runs] == ["b-run", "a-run"]
    listed = page.runs[1]
    assert (listed.status, listed.paused, listed.origin_session_id) == ("running", True, SESSION)
    record = store.get_run("a-run")
    assert record is not None
    assert (listed.created_at, listed.updated_at) == (record.created_at, record.updated_at)
    assert page.next_after is None


def test_a_page_continues_after_the_run_it_ended_with(store: WorkflowStore) -> None:
    for number in range(5):
        create(store, f"run-{number}")

    first = store.list_runs(limit=2)
    second = store.list_runs(after=first.next_after, limit=2)
    last = store.list_runs(after=second.next_after, limit=2)

    assert [r.run_id for r in first.runs + second.runs + last.runs] == [
        f"run-{n}" for n in range(5)
    ]
    assert (first.next_after, second.next_after, last.next_after) == ("run-1", "run-3", None)


def test_runs_are_filtered_by_status(store: WorkflowStore) -> None:
    running_run(store, "running-1")
    create(store, "queued-1", status="queued")
    running_run(store, "done-1")
    store.finish_run("done-1", status="completed")

    assert ids(store, status="queued") == ["queued-1"]
    assert ids(store, status="completed") == ["done-1"]


def test_runs_are_filtered_by_origin_session(store: WorkflowStore) -> None:
    running_run(store, "mine")
    running_run(store, "theirs", session_id="session-2")

    assert ids(store, session_id="session-2") == ["theirs"]


def test_runs_are_filtered_by_root_run_with_their_lineage(store: WorkflowStore) -> None:
    running_run(store)
    create(store, "other")
    store.finish_run("run-1", status="failed", error="boom")
    child = restart(store).run_id

    page = store.list_runs(root_run_id="run-1")

    assert [r.run_id for r in page.runs] == ["run-1", child]
    restarted = page.runs[1]
    assert (restarted.lineage_kind, restarted.parent_run_id, restarted.restart_number) == (
        "restart",
        "run-1",
        1,
    )
    assert page.runs[0].finished_at is not None


def test_a_cursor_naming_an_unknown_run_is_rejected(store: WorkflowStore) -> None:
    with pytest.raises(UnknownRunCursorError) as caught:
        store.list_runs(after="nobody")

    assert str(caught.value) == "Workflow runs page cursor names an unknown run: nobody"


@pytest.mark.parametrize("limit", [-1, 1001, True, "10"])
def test_a_page_limit_outside_0_to_1000_is_rejected(store: WorkflowStore, limit: Any) -> None:
    with pytest.raises(InvalidPageError) as caught:
        store.list_runs(limit=limit)

    assert str(caught.value) == (
        "Workflow runs page limit (at most 1000) must be a non-negative integer"
    )
