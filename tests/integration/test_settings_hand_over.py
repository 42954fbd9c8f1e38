"""The settings hand-over holds across processes: a continuation child takes every scope that
is active on its parent when the child's ``run.created`` commits (upstream §3.6, decisions 4
and 15), even while another process creates a scope on the parent at that very moment."""

from __future__ import annotations

from collections import Counter
from typing import Any, Final

from runledger.domain.records import LoggedEvent
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.workers import Op, Outcome, run_race

TRIALS: Final = 200
POLICY: Final[dict[str, Any]] = {
    "rules": [{"path": "/mode", "permissions": {"human": ["read", "replace"]}}],
    "max_bytes": 65536,
}


def ensure_scope_op(parent: str) -> Op:
    return {
        "op": "call",
        "method": "ensure_settings_scope",
        "args": [parent],
        "kwargs": {"settings": {"mode": "fast"}, "policy": POLICY},
    }


def create_child_op(parent: str) -> Op:
    return {
        "op": "call",
        "method": "create_run",
        "args": [f"{parent}-child"],
        "kwargs": {"workflow_name": "echo", "input": {}, "parent_run_id": parent},
    }


def judge(store: WorkflowStore, parent: str, ensured: Outcome, created: Outcome) -> str:
    """``taken`` (the scope was created before the child and moved to it), ``after`` (it was
    created after the child's ``run.created``, so it rightly stays on the parent) or
    ``missed`` (created before the child, left behind)."""
    assert ensured.ok, ensured.describe()
    assert created.ok, created.describe()
    assert ensured.result is not None
    scope_id = ensured.result["scope_id"]
    child = f"{parent}-child"
    events: list[LoggedEvent] = [
        *store.event_log(run_id=parent),
        *store.event_log(run_id=child),
    ]

    def position(wire_name: str, **payload: Any) -> int | None:
        found = [
            e.position
            for e in events
            if e.wire_name == wire_name
            and all(e.payload.get(key) == value for key, value in payload.items())
        ]
        assert len(found) <= 1, found
        return found[0] if found else None

    scope_created = position("settings.scope-created", scope_id=scope_id)
    child_created = position("run.created", run_id=child)
    moved = position("settings.scope-moved", scope_id=scope_id, run_id=child)
    assert scope_created is not None
    assert child_created is not None
    if scope_created > child_created:
        assert moved is None
        return "after"
    return "missed" if moved is None else "taken"


def test_a_scope_created_while_another_process_creates_the_continuation_is_never_left_behind(
    durable_url: str,
) -> None:
    parents = [f"parent-{n}" for n in range(TRIALS)]
    with open_store(durable_url) as driver:
        for parent in parents:
            driver.create_run(parent, workflow_name="echo", input={})
    rounds = [[[ensure_scope_op(parent)], [create_child_op(parent)]] for parent in parents]

    race = run_race(durable_url, rounds, time_budget=300, timeout=400)

    assert race.rounds_run == TRIALS
    with open_store(durable_url) as driver:
        verdicts = Counter(
            judge(driver, parent, *race.round(number)) for number, parent in enumerate(parents)
        )
    print(f"hand-over race on {durable_url.split(':')[0]}: {dict(verdicts)}")
    assert verdicts["missed"] == 0, dict(verdicts)
