"""Given-steps of the upstream §11 scenarios, so each test states only what it is about.

Notation follows upstream-behaviour.md §11: "R" is a running run bound to "session-1" in
interactive mode; WT, IC and CR are the follow-up sources of a workflow tool, an interactive
command and a controller request.
"""

from __future__ import annotations

from typing import Any, Final

from runledger.domain.ids import follow_up_message_id, workflow_message_id_for
from runledger.domain.records import (
    LoggedEvent,
    QueuedFollowUp,
    RestartReceipt,
    RunRecord,
    WorkflowMessageRecord,
)
from runledger.domain.values import Actor, ExecutionMode, JsonValue, StartStatus
from runledger.infrastructure.store import WorkflowStore

RUN: Final = "run-1"
SESSION: Final = "session-1"
OTHER_SESSION: Final = "session-2"
WT: Final = "workflow-tool"
IC: Final = "interactive-command"
CR: Final = "controller-request"
SESSION_ACTOR: Final = Actor("session", SESSION)
HUMAN: Final = Actor("human", "user-1")
CONTROLLER: Final = Actor("controller", "controller-1")
INPUT: Final = {"task": "reply"}
CONTENT_SCHEMA: Final = "pi-workflows.workflow-message-content.v1"


def create(
    store: WorkflowStore,
    run_id: str = RUN,
    *,
    parent_run_id: str | None = None,
    status: StartStatus = "running",
    input: JsonValue = None,
) -> RunRecord:
    """A run that exists but is bound to no session."""
    return store.create_run(
        run_id,
        workflow_name="echo",
        workflow_ref="builtin:echo",
        input=INPUT if input is None else input,
        parent_run_id=parent_run_id,
        status=status,
    )


def running_run(
    store: WorkflowStore,
    run_id: str = RUN,
    *,
    session_id: str = SESSION,
    execution_mode: ExecutionMode = "interactive",
    node: str = "hold",
    parent_run_id: str | None = None,
    input: JsonValue = None,
) -> RunRecord:
    """R: a run held at ``node``, bound to its origin session."""
    create(store, run_id, parent_run_id=parent_run_id, input=input)
    store.bind_origin_session(run_id, session_id, execution_mode=execution_mode)
    return store.record_progress(run_id, status="running", current_node=node)


def waiting_run(store: WorkflowStore, run_id: str = RUN, *, node: str = "wait") -> RunRecord:
    """A run parked at checkpoint ``node``, bound to "session-1"."""
    running_run(store, run_id, node=node)
    return store.record_progress(run_id, status="waiting", waiting_on=node)


def queue(
    store: WorkflowStore,
    request_id: str = "follow-1",
    *,
    run_id: str = RUN,
    prompt: str = "First task",
    actor: Actor = SESSION_ACTOR,
    source: str = WT,
    target_session_id: str = SESSION,
) -> QueuedFollowUp:
    """Queue a follow-up with the defaults of scenario A1."""
    return store.queue_follow_up(
        run_id,
        request_id=request_id,
        target_session_id=target_session_id,
        actor=actor,
        source=source,
        prompt=prompt,
    )


def queued_id(store: WorkflowStore, request_id: str = "follow-1", **kwargs: Any) -> str:
    """Queue a follow-up and return its id."""
    return queue(store, request_id, **kwargs).follow_up.follow_up_id


def message(store: WorkflowStore, workflow_message_id: str) -> WorkflowMessageRecord:
    found = store.get_workflow_message(workflow_message_id)
    assert found is not None, workflow_message_id
    return found


def follow_up_message(store: WorkflowStore, follow_up_id: str) -> WorkflowMessageRecord:
    """The follow-up's own workflow message."""
    return message(store, follow_up_message_id(follow_up_id))


def deliver(
    store: WorkflowStore,
    workflow_message_id: str,
    entry_id: str = "entry-1",
    *,
    session_id: str = SESSION,
) -> WorkflowMessageRecord:
    """Report branch evidence that the message is in the session (it becomes ``sent``)."""
    [sent] = store.report_branch(
        session_id, [(workflow_message_id, entry_id)], allowed_ids=[workflow_message_id]
    )
    return sent


def events(
    store: WorkflowStore, wire_name: str | None = None, *, run_id: str | None = None
) -> list[LoggedEvent]:
    """Logged events (of one run, with its follow-ups and messages), optionally of one name."""
    logged = store.event_log(run_id=run_id, limit=10_000)
    return [event for event in logged if wire_name is None or event.wire_name == wire_name]


def finished_event(store: WorkflowStore, run_id: str = RUN) -> LoggedEvent:
    [finished] = [
        event
        for event in events(store, "run.finished", run_id=run_id)
        if event.payload["run_id"] == run_id
    ]
    return finished


def terminal_message_id_of(store: WorkflowStore, run_id: str = RUN) -> str:
    """The ended run's terminal message id, as its ``run.finished`` event recorded it."""
    message_id = finished_event(store, run_id).payload["terminal_message_id"]
    assert isinstance(message_id, str), f"{run_id} has no terminal message"
    return message_id


def present_terminal(
    store: WorkflowStore,
    run_id: str = RUN,
    *,
    turn_id: str | None = None,
    end_turn: bool = True,
) -> tuple[str, str]:
    """Deliver the ended run's terminal message and run its model turn.

    Returns the terminal message id and the turn id.
    """
    message_id = terminal_message_id_of(store, run_id)
    deliver(store, message_id, f"entry-terminal-{run_id}")
    turn = store.start_turn(
        message_id,
        run_id=run_id,
        target_session_id=SESSION,
        workflow_turn_id=turn_id or f"turn-{run_id}",
    )
    if end_turn:
        store.end_turn(
            turn.workflow_turn_id,
            stop_reason="completed",
            response_session_entry_id=f"assistant-{run_id}",
        )
    return message_id, turn.workflow_turn_id


def restart(store: WorkflowStore, run_id: str = RUN) -> RestartReceipt:
    """Present the ended run's terminal result and restart it from that message."""
    message_id, _ = present_terminal(store, run_id)
    return store.restart_run(run_id, session_id=SESSION, workflow_message_id=message_id)


def fail_restart_chain(store: WorkflowStore, restarts: int) -> str:
    """R fails, then ``restarts`` restart children each start and fail differently.

    Returns the id of the last run of the chain (already failed).
    """
    running_run(store)
    store.finish_run(RUN, status="failed", error="boom 0")
    current = RUN
    for number in range(1, restarts + 1):
        current = restart(store, current).run_id
        store.record_progress(current, status="running", current_node="hold")
        store.finish_run(current, status="failed", error=f"boom {number}")
    return current


def step_content(
    source_id: str,
    idempotency_key: str,
    *,
    prompt: str = "Continue the workflow step.",
    trigger_turn: bool = True,
) -> dict[str, Any]:
    """Upstream §5.3 step message content for interaction request ``source_id``."""
    return {
        "schema": CONTENT_SCHEMA,
        "customType": "pi-workflows-step",
        "content": prompt,
        "display": True,
        "details": {
            "schema": "pi-workflows.agent-step-message.v1",
            "kind": "step",
            "contract": {"type": "object"},
            "requestId": source_id,
            "workflowMessageId": workflow_message_id_for("step", source_id, idempotency_key),
            "reason": idempotency_key,
        },
        "triggerTurn": trigger_turn,
    }


def notification_content(
    source_id: str,
    idempotency_key: str,
    *,
    run_id: str = RUN,
    text: str = "Hosted progress.",
    trigger_turn: bool = False,
) -> dict[str, Any]:
    """Upstream §5.3 notification message content."""
    return {
        "schema": CONTENT_SCHEMA,
        "customType": "pi-workflows-notification",
        "content": text,
        "display": True,
        "details": {
            "workflowMessageId": workflow_message_id_for(
                "notification", source_id, idempotency_key
            ),
            "notificationId": source_id,
            "runId": run_id,
            "kind": "progress",
        },
        "triggerTurn": trigger_turn,
    }


def notify(
    store: WorkflowStore, source_id: str = "notification-1", key: str = "1", *, run_id: str = RUN
) -> WorkflowMessageRecord:
    """Create a notification message of the run for its origin session."""
    return store.create_workflow_message(
        run_id,
        kind="notification",
        source_id=source_id,
        idempotency_key=key,
        content=notification_content(source_id, key, run_id=run_id),
    )


def step(
    store: WorkflowStore,
    source_id: str = "interaction-1",
    key: str = "initial",
    *,
    run_id: str = RUN,
) -> WorkflowMessageRecord:
    """Create a step message of the run for its origin session."""
    return store.create_workflow_message(
        run_id,
        kind="step",
        source_id=source_id,
        idempotency_key=key,
        content=step_content(source_id, key),
    )
