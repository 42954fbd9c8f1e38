"""The Python API refuses nonsense by name: a wrong type is a ``WorkflowError`` naming the
argument (and, inside a JSON value, the path), a vocabulary lists its words, a call that does
not fit names ``WorkflowStore``'s signature, and nothing of it is written."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from runledger.domain import Actor
from runledger.domain.errors import (
    InvalidActorError,
    InvalidArgumentTypeError,
    InvalidCallError,
    InvalidRunStatusError,
    NonFiniteJsonNumberError,
    NotPlainJsonError,
    UnknownActorTypeError,
)
from runledger.infrastructure.store import WorkflowStore

SESSION = "session-1"


@pytest.fixture
def prepared(store: WorkflowStore) -> WorkflowStore:
    store.create_run("run-1", workflow_name="review", input={})
    store.bind_origin_session("run-1", SESSION)
    return store


LOOKUPS: list[tuple[str, Callable[[WorkflowStore, Any], Any]]] = [
    ("run_id", lambda s, v: s.get_run(v)),
    ("follow_up_id", lambda s, v: s.get_follow_up(v)),
    ("workflow_message_id", lambda s, v: s.get_workflow_message(v)),
    ("workflow_turn_id", lambda s, v: s.get_turn(v)),
    ("decision_id", lambda s, v: s.get_human_decision(v)),
    ("effect_id", lambda s, v: s.get_effect(v)),
    ("run_id", lambda s, v: s.follow_up_queue(v)),
    ("run_id", lambda s, v: s.terminal_data(v)),
    ("session_id", lambda s, v: s.session_outbox(v)),
    ("session_id", lambda s, v: s.next_deliverable(v)),
    ("run_id", lambda s, v: s.settings_scopes(v)),
    ("after", lambda s, v: s.list_runs(after=v)),
]
WRONG = [123, None, ["run-1"], 4.5, b"run-1"]
OPTIONAL = {"after"}
"""Lookups whose None means "not given" (the first page), so None is no wrong type there."""


@pytest.mark.parametrize(
    ("name", "look_up", "value"),
    [
        (name, look_up, value)
        for name, look_up in LOOKUPS
        for value in WRONG
        if not (value is None and name in OPTIONAL)
    ],
)
def test_a_lookup_by_an_id_that_is_not_text_is_refused_by_name(
    prepared: WorkflowStore, name: str, look_up: Callable[[WorkflowStore, Any], Any], value: Any
) -> None:
    with pytest.raises(InvalidArgumentTypeError) as raised:
        look_up(prepared, value)
    assert str(raised.value) == (
        f"Workflow argument {name} must be text, not {type(value).__name__}"
    )
    assert raised.value.code == "argument.wrong-type"


def test_an_unknown_id_of_the_right_type_is_still_none(prepared: WorkflowStore) -> None:
    assert prepared.get_run("no-such-run") is None
    assert prepared.get_follow_up("follow-up-nope") is None
    assert prepared.get_human_decision("decision-nope") is None


def test_a_status_filter_outside_the_vocabulary_lists_the_statuses(
    prepared: WorkflowStore,
) -> None:
    with pytest.raises(InvalidRunStatusError) as raised:
        prepared.list_runs(status="sleeping")
    assert str(raised.value) == (
        "Workflow run status sleeping is not one of: queued, running, waiting, completed, "
        "failed, timed_out, cancelled"
    )


def test_an_actor_type_outside_the_vocabulary_lists_the_types() -> None:
    with pytest.raises(UnknownActorTypeError) as raised:
        Actor("robot", "x")  # type: ignore[arg-type]
    assert "(actor types: session, host, controller, channel, human" in str(raised.value)


def queue(store: WorkflowStore, actor: Any) -> Any:
    return store.queue_follow_up(
        "run-1",
        request_id="request-1",
        target_session_id=SESSION,
        actor=actor,
        source="pi-session",
        prompt="Then summarise.",
    )


def test_an_actor_given_as_its_json_form_is_converted_to_an_actor(
    prepared: WorkflowStore,
) -> None:
    queued = queue(prepared, {"type": "session", "id": SESSION})
    assert queued.follow_up.actor == Actor("session", SESSION)
    assert type(queued.follow_up.actor) is Actor


@pytest.mark.parametrize(
    "actor",
    [
        {"type": "session", "id": SESSION, "name": "typo"},
        {"id": SESSION},
        "session",
        ("session", SESSION),
    ],
)
def test_an_actor_in_any_other_form_is_refused_and_nothing_written(
    prepared: WorkflowStore, actor: Any
) -> None:
    before = len(prepared.event_log())
    with pytest.raises(InvalidActorError):
        queue(prepared, actor)
    assert len(prepared.event_log()) == before


@pytest.mark.parametrize(
    ("value", "error", "message"),
    [
        (
            {1, 2},
            NotPlainJsonError,
            "Only plain objects can be stored as canonical JSON (input is a set)",
        ),
        (
            {"when": datetime(2026, 1, 1, tzinfo=UTC)},
            NotPlainJsonError,
            "Only plain objects can be stored as canonical JSON (input.when is a datetime)",
        ),
        (
            [{"ok": 1}, {"score": float("nan")}],
            NonFiniteJsonNumberError,
            "JSON numbers must be finite (input[1].score is nan)",
        ),
    ],
)
def test_an_input_that_is_no_json_names_the_path_and_writes_nothing(
    store: WorkflowStore, value: Any, error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        store.create_run("run-2", workflow_name="review", input=value)
    assert str(raised.value) == message
    assert store.event_log() == []
    assert store.get_run("run-2") is None


def test_progress_update_data_names_its_argument(prepared: WorkflowStore) -> None:
    with pytest.raises(NotPlainJsonError) as raised:
        prepared.publish_update(
            "run-1", attempt_id="a1", update_type="log", key="k", data={"at": object()}
        )
    assert str(raised.value).endswith("(data.at is an object)")


@pytest.mark.parametrize(
    ("call", "says"),
    [
        (
            lambda s: s.queue_follow_up("run-1", "request-1"),
            "Too many positional arguments; WorkflowStore.queue_follow_up takes (run_id, *, "
            "request_id, target_session_id, actor, source, prompt)",
        ),
        (
            lambda s: s.create_run("run-2"),
            "Missing a required argument: 'workflow_name'; WorkflowStore.create_run takes",
        ),
        (
            lambda s: s.finish_run("run-1", status="completed", state="done"),
            "Got an unexpected keyword argument 'state'; WorkflowStore.finish_run takes",
        ),
        (
            lambda s: s.list_runs("running"),
            "Too many positional arguments; WorkflowStore.list_runs takes (*, status,",
        ),
    ],
)
def test_a_call_that_does_not_fit_names_the_store_method_and_writes_nothing(
    prepared: WorkflowStore, call: Callable[[WorkflowStore], Any], says: str
) -> None:
    before = len(prepared.event_log())
    with pytest.raises(InvalidCallError) as raised:
        call(prepared)
    assert str(raised.value).startswith(says)
    assert "WorkflowRuns" not in str(raised.value)
    assert len(prepared.event_log()) == before
