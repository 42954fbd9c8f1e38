"""Steps of multi-aggregate histories, made by the domain functions the commands call.

Each step takes the ``AggregateSet`` a history is built on (see ``history_of``). Notation as
in ``tests.support.scenario``: runs bound to "session-1", interactive, unless told.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, Final

from runledger.domain import lineage, outbox, run_endings, settings_changes
from runledger.domain.aggregates import AggregateSet
from runledger.domain.ids import follow_up_id_for, follow_up_message_id
from runledger.domain.runs import Run
from runledger.domain.settings_policy import check_policy
from runledger.domain.values import HOST, Actor

Step = Callable[[AggregateSet], object]

NOW: Final = datetime(2026, 1, 1, tzinfo=UTC)
LATER: Final = NOW + timedelta(minutes=1)
SESSION: Final = "session-1"
SESSION_ACTOR: Final = Actor("session", SESSION)
INPUT: Final = {"task": "reply"}
HUMAN: Final = Actor("human", "user-1")
SETTINGS_POLICY: Final = check_policy(
    {"rules": [{"path": "/mode", "permissions": {"human": ["read", "replace"]}}]}
)


def created(
    run_id: str = "run-1",
    *,
    parent_run_id: str | None = None,
    status: str = "running",
    session_id: str | None = SESSION,
    execution_mode: str = "interactive",
) -> Step:
    """A run (a continuation child of ``parent_run_id``), bound to ``session_id`` if given."""

    def step(aggregates: AggregateSet) -> None:
        run = lineage.create_run(
            aggregates,
            run_id,
            workflow_name="echo",
            input=INPUT,
            workflow_ref="builtin:echo",
            title=None,
            parent_run_id=parent_run_id,
            status=status,
            actor=HOST,
            now=NOW,
        )
        if session_id is not None:
            run.bind_origin_session(session_id, execution_mode, actor=HOST, now=NOW)

    return step


def restart_child(run_id: str, *, parent_run_id: str, fingerprint: str = "f" * 64) -> Step:
    """A running restart child of ``parent_run_id``, bound to "session-1"."""

    def step(aggregates: AggregateSet) -> None:
        child = Run.create(
            run_id,
            workflow_name="echo",
            input=INPUT,
            workflow_ref="builtin:echo",
            title=None,
            status="running",
            parent=aggregates.run(parent_run_id),
            lineage_kind="restart",
            parent_terminal_fingerprint=fingerprint,
            actor=HOST,
            now=NOW,
        )
        aggregates.add(child).bind_origin_session(SESSION, "interactive", actor=HOST, now=NOW)

    return step


def queued(run_id: str, request_id: str) -> Step:
    """A follow-up queued on the run by "session-1"."""

    def step(aggregates: AggregateSet) -> None:
        outbox.queue_follow_up(
            aggregates,
            run_id,
            request_id=request_id,
            target_session_id=SESSION,
            actor=SESSION_ACTOR,
            source="workflow-tool",
            prompt=f"{request_id} prompt",
            now=NOW,
        )

    return step


def sent(run_id: str, request_id: str, entry_id: str = "entry-1") -> Step:
    """The follow-up's message reported in "session-1"'s branch."""
    message_id = follow_up_message_id(follow_up_id_for(run_id, request_id))
    return lambda aggregates: outbox.adopt_branch(
        aggregates, SESSION, [(message_id, entry_id)], frozenset({message_id}), now=NOW
    )


def ended(run_id: str, status: str = "failed", **outcome: Any) -> Step:
    """The run finished by its host (error "boom" for a bad end unless told)."""
    if status != "completed":
        outcome.setdefault("error", "boom")
    return lambda aggregates: run_endings.finish_run(
        aggregates,
        aggregates.run(run_id),
        status=status,
        final_output=outcome.get("final_output"),
        error=outcome.get("error"),
        status_detail=outcome.get("status_detail"),
        actor=HOST,
        now=NOW,
    )


def scoped(run_id: str = "run-1", *, mount_path: str = "") -> Step:
    """The run's settings scope at ``mount_path`` (invocation 1): ``{"mode": "a"}``, whose
    "/mode" a human may read and replace."""
    return lambda aggregates: settings_changes.ensure_settings_scope(
        aggregates,
        run_id,
        mount_path=mount_path,
        invocation=1,
        settings={"mode": "a"},
        policy=SETTINGS_POLICY,
        actor=HOST,
        now=NOW,
    )


def mode_changed(
    run_id: str, scope_id: str, request_id: str = "change-1", *, mode: str = "b"
) -> Step:
    """A human replaced the scope's "/mode" through the run."""
    return lambda aggregates: settings_changes.change_settings(
        aggregates,
        run_id,
        scope_id,
        request_id=request_id,
        patch=[{"op": "replace", "path": "/mode", "value": mode}],
        actor=HUMAN,
        source="interactive-command",
        expected_change_number=None,
        now=NOW,
    )
