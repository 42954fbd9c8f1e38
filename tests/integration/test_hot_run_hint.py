"""A command on a run that conflicted lately holds it from its first attempt: the store's
door tells the executor which run the call is about (``LIKELY_CHANGED``), so the command's
logic runs once, not once to learn what it changes and again holding it."""

from __future__ import annotations

import pytest

from runledger.domain import outbox
from runledger.domain.ids import aggregate_id
from runledger.domain.values import Actor
from runledger.infrastructure.commits.executor import CommandExecutor
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore


def _queue(store: WorkflowStore, number: int) -> None:
    store.queue_follow_up(
        "hot-run",
        request_id=f"request-{number}",
        target_session_id="session-1",
        actor=Actor("session", "session-1"),
        source="pi-session",
        prompt=f"Follow-up {number}",
    )


def _runs_of_queue_follow_up(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    calls: list[str] = []
    queue = outbox.queue_follow_up

    def counted(*args: object, **kwargs: object) -> object:
        calls.append(str(kwargs["request_id"]))
        return queue(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(outbox, "queue_follow_up", counted)
    return calls


@pytest.fixture
def hot_run(store: WorkflowStore, runtime: StoreRuntime) -> StoreRuntime:
    store.create_run("hot-run", workflow_name="w", input={})
    store.bind_origin_session("hot-run", "session-1")
    # As after a lost race with another process on this run.
    commits = runtime.app.commits
    assert isinstance(commits, CommandExecutor)
    commits._note_conflict([aggregate_id("run", "hot-run")])
    return runtime


def test_a_command_on_a_hot_run_runs_its_logic_once(
    store: WorkflowStore, hot_run: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _runs_of_queue_follow_up(monkeypatch)

    _queue(store, 1)

    assert calls == ["request-1"]
    queue = store.follow_up_queue("hot-run")
    assert queue is not None
    assert [item.request_id for item in queue.follow_ups] == ["request-1"]


def test_without_the_hint_the_hot_run_is_found_only_after_a_first_run(
    store: WorkflowStore, hot_run: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = _runs_of_queue_follow_up(monkeypatch)
    commits = hot_run.app.commits
    assert isinstance(commits, CommandExecutor)
    monkeypatch.setattr(
        "runledger.infrastructure.commits.executor.LIKELY_CHANGED",
        type("NoHint", (), {"get": staticmethod(lambda: ())})(),
    )

    _queue(store, 2)

    assert calls == ["request-2", "request-2"]
    assert commits.stats.conflicts == 0
