"""Read models as of a log position, on memory, a SQLite file and PostgreSQL.

During a live run every read-model query is asked after each command, and its answer is
recorded with the log's position at that moment; afterwards the same queries with ``as_of``
that position must give exactly the recorded answers, from a replay that leaves the live
model alone. Positions that are not in the log are refused with a clear ``WorkflowError``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runledger.domain.errors import AsOfBeyondLogError, InvalidAsOfError, WorkflowError
from runledger.domain.ids import follow_up_message_id
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import (
    HUMAN,
    IC,
    RUN,
    SESSION,
    SESSION_ACTOR,
    WT,
    create,
    deliver,
    queued_id,
    running_run,
)

CHILD = "run-child"
POLICY = {"rules": [{"path": "", "permissions": {"human": ["read", "add", "replace"]}}]}

Answers = dict[str, Any]


def plain(value: Any) -> Any:
    """A query result as plain JSON values."""
    if value is None:
        return None
    if isinstance(value, list):
        return [item.model_dump(mode="json") for item in value]
    return value.model_dump(mode="json")


def ask_everything(store: WorkflowStore, as_of: int | None = None) -> Answers:
    """Every read-model query of the scenario's runs, sessions and scopes."""
    answers: Answers = {}
    for run_id in (RUN, CHILD, "run-unknown"):
        answers[f"follow_up_queue({run_id})"] = plain(store.follow_up_queue(run_id, as_of=as_of))
        answers[f"follow_up_queue_range({run_id})"] = plain(
            store.follow_up_queue_range(run_id, start=1, limit=2, as_of=as_of)
        )
        answers[f"terminal_data({run_id})"] = plain(store.terminal_data(run_id, as_of=as_of))
        try:
            answers[f"viewer_deltas({run_id})"] = plain(
                store.viewer_deltas(run_id, after_revision=0, as_of=as_of)
            )
        except WorkflowError as error:  # an unknown run is an answer too
            answers[f"viewer_deltas({run_id})"] = (error.code, error.message)
        scopes = store.settings_scopes(run_id, as_of=as_of)
        answers[f"settings_scopes({run_id})"] = plain(scopes)
        for scope in scopes:
            answers[f"settings_scope_at_change({scope.scope_id}, 1)"] = plain(
                store.settings_scope_at_change(scope.scope_id, 1, as_of=as_of)
            )
    answers["session_outbox"] = plain(store.session_outbox(SESSION, as_of=as_of))
    answers["next_deliverable"] = plain(store.next_deliverable(SESSION, as_of=as_of))
    answers["list_runs"] = plain(store.list_runs(as_of=as_of))
    return answers


def live_run(store: WorkflowStore, runtime: StoreRuntime) -> dict[int, Answers]:
    """A run with follow-ups, settings, a continuation and an ending; the answers after
    every command, by the log position they were given at."""
    recorded: dict[int, Answers] = {}

    def step(command: Callable[[], Any]) -> None:
        command()
        recorded[runtime.storage.max_position()] = ask_everything(store)

    step(lambda: running_run(store))
    step(lambda: queued_id(store, "request-1"))
    removed = queued_id(store, "request-2", prompt="Second task")
    step(lambda: store.remove_follow_up(RUN, removed, actor=SESSION_ACTOR, source=WT))
    scope = store.ensure_settings_scope(RUN, settings={"mode": "a"}, policy=POLICY)
    step(
        lambda: store.change_settings(
            RUN,
            scope.scope_id,
            request_id="settings-1",
            actor=HUMAN,
            source=IC,
            patch=[{"op": "replace", "path": "/mode", "value": "b"}],
        )
    )
    step(lambda: create(store, CHILD, parent_run_id=RUN))
    step(lambda: store.finish_run(RUN, status="completed", final_output={"reply": "done"}))
    first = follow_up_message_id(queued_id(store, "request-1"))
    step(lambda: deliver(store, first, "entry-1"))
    return recorded


def test_every_query_as_of_a_position_answers_as_it_did_then(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    recorded = live_run(store, runtime)

    for position, answers in recorded.items():
        assert ask_everything(store, as_of=position) == answers, f"as of {position}"


def test_as_of_the_head_answers_as_the_live_model(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    live_run(store, runtime)

    assert ask_everything(store, as_of=runtime.storage.max_position()) == ask_everything(store)


def test_as_of_zero_answers_as_an_empty_store(store: WorkflowStore, runtime: StoreRuntime) -> None:
    live_run(store, runtime)

    assert store.follow_up_queue(RUN, as_of=0) is None
    assert store.list_runs(as_of=0).runs == []


def test_a_replay_as_of_a_position_leaves_the_live_model_alone(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    live_run(store, runtime)
    digests = {name: store.read_model_digest(name) for name in store.projection_names()}
    status = store.projection_status()

    ask_everything(store, as_of=3)

    assert {name: store.read_model_digest(name) for name in digests} == digests
    assert store.projection_status() == status


def test_a_digest_as_of_a_position_is_the_digest_the_live_model_had_then(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    running_run(store)
    queued_id(store, "request-1")
    position = runtime.storage.max_position()
    then = {name: store.read_model_digest(name) for name in store.projection_names()}
    queued_id(store, "request-2")

    assert {name: store.read_model_digest(name, as_of=position) for name in then} == then


@pytest.mark.parametrize("as_of", [-1, 1.0, "3", True, [1]])
def test_as_of_that_is_not_a_position_is_refused(store: WorkflowStore, as_of: Any) -> None:
    running_run(store)

    with pytest.raises(InvalidAsOfError) as raised:
        store.follow_up_queue(RUN, as_of=as_of)

    assert str(raised.value) == "Read-model position as_of must be a non-negative integer or None"


def test_as_of_beyond_the_end_of_the_log_is_refused(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    running_run(store)
    head = runtime.storage.max_position()

    with pytest.raises(AsOfBeyondLogError) as raised:
        store.terminal_data(RUN, as_of=head + 1)

    assert str(raised.value) == (
        f"Log position as_of {head + 1} is beyond the end of the log ({head})"
    )


def test_a_digest_as_of_beyond_the_end_of_the_log_is_refused(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    running_run(store)

    with pytest.raises(AsOfBeyondLogError):
        store.read_model_digest("runs", as_of=runtime.storage.max_position() + 1)
