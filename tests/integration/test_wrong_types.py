"""A wrong type anywhere gets a clear WorkflowError, never a bare TypeError."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import bare_errors

WRONG = [None, 42, 4.5, b"bytes", ["list"], {"a": 1}, object()]
SESSION = Actor("session", "session-1")


def prepared(store: WorkflowStore) -> WorkflowStore:
    store.create_run("run-1", workflow_name="echo", input={})
    store.bind_origin_session("run-1", "session-1")
    return store


def call_with(value: Any) -> list[tuple[str, Callable[[WorkflowStore], Any]]]:
    return [
        ("create_run id", lambda s: s.create_run(value, workflow_name="w", input={})),
        ("create_run name", lambda s: s.create_run("r2", workflow_name=value, input={})),
        (
            "create_run title",
            lambda s: s.create_run("r3", workflow_name="w", input={}, title=value),
        ),
        (
            "create_run parent",
            lambda s: s.create_run("r4", workflow_name="w", input={}, parent_run_id=value),
        ),
        ("bind session", lambda s: s.bind_origin_session("run-1", value)),
        ("bind mode", lambda s: s.bind_origin_session("run-1", "s", execution_mode=value)),
        ("progress status", lambda s: s.record_progress("run-1", status=value)),
        (
            "progress node",
            lambda s: s.record_progress("run-1", status="running", current_node=value),
        ),
        ("pause detail", lambda s: s.pause_run("run-1", status_detail=value)),
        ("instructions", lambda s: s.set_presentation_instructions("run-1", value)),
        ("finish status", lambda s: s.finish_run("run-1", status=value)),
        ("finish error", lambda s: s.finish_run("run-1", status="failed", error=value)),
        ("interrupt reason", lambda s: s.interrupt_run("run-1", value)),
        (
            "restart session",
            lambda s: s.restart_run("run-1", session_id=value, workflow_message_id="m"),
        ),
        (
            "queue request",
            lambda s: s.queue_follow_up(
                "run-1",
                request_id=value,
                target_session_id="session-1",
                actor=SESSION,
                source="wt",
                prompt="p",
            ),
        ),
        (
            "queue source",
            lambda s: s.queue_follow_up(
                "run-1",
                request_id="q",
                target_session_id="session-1",
                actor=SESSION,
                source=value,
                prompt="p",
            ),
        ),
        (
            "queue prompt",
            lambda s: s.queue_follow_up(
                "run-1",
                request_id="q",
                target_session_id="session-1",
                actor=SESSION,
                source="wt",
                prompt=value,
            ),
        ),
        (
            "queue actor",
            lambda s: s.queue_follow_up(
                "run-1",
                request_id="q",
                target_session_id="session-1",
                actor=value,
                source="wt",
                prompt="p",
            ),
        ),
        (
            "queue run",
            lambda s: s.queue_follow_up(
                value,
                request_id="q",
                target_session_id="session-1",
                actor=SESSION,
                source="wt",
                prompt="p",
            ),
        ),
        ("remove id", lambda s: s.remove_follow_up("run-1", value, actor=SESSION, source="wt")),
        ("remove actor", lambda s: s.remove_follow_up("run-1", "f", actor=value, source="wt")),
        (
            "message kind",
            lambda s: s.create_workflow_message(
                "run-1", kind=value, source_id="s", idempotency_key="k", content={}
            ),
        ),
        (
            "message source",
            lambda s: s.create_workflow_message(
                "run-1", kind="notification", source_id=value, idempotency_key="k", content={}
            ),
        ),
        (
            "message content",
            lambda s: s.create_workflow_message(
                "run-1", kind="notification", source_id="s", idempotency_key="k", content=value
            ),
        ),
        ("branch entries", lambda s: s.report_branch("session-1", value, allowed_ids=["m"])),
        ("branch allowed", lambda s: s.report_branch("session-1", [("m", "e")], allowed_ids=value)),
        (
            "turn message",
            lambda s: s.start_turn(value, run_id="run-1", target_session_id="session-1"),
        ),
        (
            "turn id",
            lambda s: s.start_turn(
                "m", run_id="run-1", target_session_id="session-1", workflow_turn_id=value
            ),
        ),
        ("end turn", lambda s: s.end_turn(value, stop_reason="completed")),
        ("event log", lambda s: s.event_log(after=value)),
        ("queue range", lambda s: s.follow_up_queue_range("run-1", start=value, limit=5)),
        ("viewer cursor", lambda s: s.viewer_deltas("run-1", after_revision=value)),
    ]


@pytest.mark.parametrize("value", WRONG, ids=lambda value: type(value).__name__)
def test_no_command_or_query_answers_a_wrong_type_with_a_bare_type_error(
    store: WorkflowStore, value: Any
) -> None:
    prepared(store)
    before = store.event_log()
    bare = bare_errors(store, call_with(value))
    assert not bare, "\n".join(bare)
    if value is not None:  # None is a valid value of the optional arguments above
        changed = [event.wire_name for event in store.event_log()[len(before) :]]
        assert changed == [], f"a rejected wrong type wrote {changed}"
