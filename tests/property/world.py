"""A small world on a store for the property tests, and a baseline value for every argument.

Each example gets its own world (fresh ids), so a command that one example let through (an
ended run, a consumed turn) never dulls the next; a baseline argument is one that would be
accepted in that world, so a call with only one hostile argument reaches the rules behind it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any, Final

from runledger.domain.records import RunClaim
from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import notification_content
from tests.support.sessions import session_binding

_worlds = itertools.count(1)


@dataclass(frozen=True)
class World:
    """The ids of one world: a bound run with a sent follow-up and an open turn, an ended run."""

    run_id: str
    ended_run_id: str
    session_id: str
    follow_up_id: str
    message_id: str
    turn_id: str
    decision_id: str
    effect_id: str
    scope_id: str
    claim: RunClaim
    number: int

    @property
    def actor(self) -> Actor:
        return Actor("session", self.session_id)


def build_world(store: WorkflowStore) -> World:
    """A new world on ``store``, with ids no other world uses."""
    number = next(_worlds)
    run_id, ended_run_id, session_id = f"run-{number}", f"ended-{number}", f"session-{number}"
    actor = Actor("session", session_id)
    for each in (run_id, ended_run_id):
        store.create_run(each, workflow_name="echo", input={"task": "reply"})
        store.bind_origin_session(each, session_id)
    queued = store.queue_follow_up(
        run_id,
        request_id="request-1",
        target_session_id=session_id,
        actor=actor,
        source="worktree",
        prompt="hello",
    )
    follow_up_message = store.session_outbox(session_id)[0].workflow_message_id
    store.report_branch(
        session_id, [(follow_up_message, f"entry-{number}")], allowed_ids=[follow_up_message]
    )
    turn_id = f"turn-{number}"
    store.start_turn(
        follow_up_message, run_id=run_id, target_session_id=session_id, workflow_turn_id=turn_id
    )
    store.finish_run(ended_run_id, status="failed", error="boom")
    decision = store.request_human_decision(
        run_id, node_id="approve", attempt_id="attempt-1", request=DECISION_REQUEST
    )
    store.record_session_binding(run_id, session_binding(run_id, session_id))
    effect = store.reserve_effect(run_id, effect_type="email", key="key-1", request={"to": "a"})
    scope = store.ensure_settings_scope(run_id, settings={"mode": "a"}, policy=SETTINGS_POLICY)
    # A run of its own holds the lease, so the other commands of the world need no authority.
    claimed_run_id = f"claimed-{number}"
    store.create_run(claimed_run_id, workflow_name="echo", input={})
    claim = store.claim_run(claimed_run_id, owner_type="host", owner_id=f"worker-{number}")
    assert claim is not None
    return World(
        run_id=run_id,
        ended_run_id=ended_run_id,
        session_id=session_id,
        follow_up_id=queued.follow_up.follow_up_id,
        message_id=follow_up_message,
        turn_id=turn_id,
        decision_id=decision.decision_id,
        effect_id=effect.effect.effect_id,
        scope_id=scope.scope_id,
        claim=claim,
        number=number,
    )


DECISION_REQUEST: Final = {"title": "Ship it?", "choices": ["yes", "no"]}
SETTINGS_POLICY: Final = {
    "rules": [{"path": "/mode", "permissions": {"session": ["read", "replace"]}}],
    "max_bytes": 4096,
}


SPECIFIC: Final[dict[tuple[str, str], Any]] = {
    ("create_run", "status"): "running",
    ("record_progress", "status"): "waiting",
    ("finish_run", "status"): "completed",
    ("end_turn", "workflow_turn_id"): "{turn}",
    ("start_turn", "workflow_turn_id"): "another-turn-{number}",
    ("create_run", "run_id"): "new-run-{number}",
    ("restart_run", "workflow_message_id"): "{terminal}",
    ("remove_follow_up", "follow_up_id"): "{follow_up}",
    ("continue_after_decision", "run_id"): None,
    ("reserve_effect", "request"): {"to": "b"},
    ("reserve_effect", "key"): "key-{number}-2",
    ("append_session_events", "records"): [],
}
"""Baselines that depend on the command, not only on the argument's name."""

GENERAL: Final[dict[str, Any]] = {
    "run_id": "{run}",
    "source_run_id": "{ended}",
    "parent_run_id": None,
    "session_id": "{session}",
    "target_session_id": "{session}",
    "execution_mode": "interactive",
    "workflow_name": "echo",
    "workflow_ref": None,
    "title": "A title",
    "input": {"task": "reply"},
    "status": "running",
    "current_node": "node-a",
    "current_attempt_id": "attempt-1",
    "waiting_on": None,
    "status_detail": "on it",
    "instructions": "Say what happened.",
    "final_output": {"answer": 42},
    "error": None,
    "reason": "host stopped",
    "workflow_message_id": "{message}",
    "workflow_turn_id": None,
    "request_id": "request-{number}",
    "actor": "{actor}",
    "source": "worktree",
    "prompt": "once more",
    "follow_up_id": "{follow_up}",
    "entries": [("{message}", "entry-{number}")],
    "allowed_ids": ["{message}"],
    "stop_reason": "completed",
    "response_session_entry_id": None,
    "kind": "notification",
    "source_id": "source-{number}",
    "idempotency_key": "key-1",
    "content": "{content}",
    "after": 0,
    "limit": 10,
    "start": 0,
    "after_revision": 1,
    "name": "follow_up_queue",
    "progress": None,
    "node_id": "review",
    "attempt_id": "attempt-{number}",
    "request": DECISION_REQUEST,
    "decision_id": "{decision}",
    "response": {"choice": "yes"},
    "submission_id": "submission-{number}",
    "continue_run": False,
    "provenance": "explicit_cancel",
    "owner_type": "host",
    "owner_id": "worker-{number}-2",
    "lease_ms": 30_000,
    "claim": "{claim}",
    "authority": None,
    "binding": "{binding}",
    "entry": {"id": "entry-{number}", "type": "message"},
    "records": [],
    "capture": {
        "schema": "pi-workflows.session-capture.v1",
        "eventSchema": "pi-workflows.session-event.v1",
        "status": "recording",
        "entryCount": 0,
        "eventCount": 0,
    },
    "effect_type": "email",
    "key": "key-1",
    "effect_id": "{effect}",
    "attempt": 1,
    "outcome": "applied",
    "result": {"sent": True},
    "mount_path": "",
    "invocation": 2,
    "settings": {"mode": "a"},
    "policy": SETTINGS_POLICY,
    "scope_id": "{scope}",
    "patch": [{"op": "replace", "path": "/mode", "value": "b"}],
    "expected_change_number": None,
    "change_number": 0,
    "update_type": "progress",
    "data": {"done": 1},
    "root_run_id": None,
    "lineage": False,
    "as_of": None,
    "token": "rl1.0.0",
    "bundle": "no-such-bundle.jsonl",
}
"""A baseline for every argument name of the public surface (a new one must be added here)."""


def baseline(store: WorkflowStore, world: World, method: str, name: str) -> Any:
    """The accepted value of argument ``name`` of ``method`` in ``world``."""
    template = SPECIFIC.get((method, name), GENERAL[name])
    return _filled(store, world, template)


def _filled(store: WorkflowStore, world: World, template: Any) -> Any:
    if isinstance(template, list):
        return [_filled(store, world, item) for item in template]
    if isinstance(template, tuple):
        return tuple(_filled(store, world, item) for item in template)
    if template == "{actor}":
        return world.actor
    if template == "{claim}":
        return world.claim
    if template == "{binding}":
        return session_binding(world.run_id, world.session_id)
    if template == "{content}":
        return notification_content(f"source-{world.number}", "key-1", run_id=world.run_id)
    if template == "{terminal}":
        terminal = [m for m in store.session_outbox(world.session_id) if m.kind == "terminal"]
        return terminal[0].workflow_message_id if terminal else "no-terminal"
    if not isinstance(template, str):
        return template
    return template.format(
        run=world.run_id,
        ended=world.ended_run_id,
        session=world.session_id,
        message=world.message_id,
        follow_up=world.follow_up_id,
        turn=world.turn_id,
        decision=world.decision_id,
        effect=world.effect_id,
        scope=world.scope_id,
        number=world.number,
    )
