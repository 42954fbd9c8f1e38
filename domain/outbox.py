"""What a command puts into a session's outbox, built in one place for every caller."""

from __future__ import annotations

from datetime import datetime

from runledger.domain.follow_ups import FollowUp
from runledger.domain.ids import follow_up_message_id, terminal_source_id
from runledger.domain.runs import Run
from runledger.domain.values import Actor
from runledger.domain.workflow_messages import WorkflowMessage, follow_up_content, terminal_content


def accept_follow_up(
    run: Run,
    follow_up_id: str,
    *,
    request_id: str,
    target_session_id: str,
    actor: Actor,
    source: str,
    prompt: str,
    now: datetime,
) -> tuple[FollowUp, WorkflowMessage]:
    """The run accepts a follow-up: it takes the next order, and its message is pending."""
    order = run.accept_follow_up(follow_up_id, actor=actor, now=now)
    message_id = follow_up_message_id(follow_up_id)
    follow_up = FollowUp.queue(
        follow_up_id,
        run_id=run.run_id,
        request_id=request_id,
        order=order,
        target_session_id=target_session_id,
        actor=actor,
        source=source,
        prompt=prompt,
        workflow_message_id=message_id,
        now=now,
    )
    message = WorkflowMessage.create(
        message_id,
        run_id=run.run_id,
        target_session_id=target_session_id,
        kind="followUp",
        source_id=follow_up_id,
        content=follow_up_content(
            workflow_message_id=message_id,
            follow_up_id=follow_up_id,
            run_id=run.run_id,
            prompt=prompt,
        ),
        actor=actor,
        now=now,
    )
    return follow_up, message


def terminal_message(
    run: Run, earlier: list[Run], *, actor: Actor, now: datetime
) -> WorkflowMessage | None:
    """The presentation message of a run that just ended (upstream §5.6), if it gets one.

    ``earlier`` are the run's ancestors, oldest first; only ended ones are outcomes.
    """
    if (
        run.terminal_message_id is None
        or run.terminal_fingerprint is None
        or run.origin_session_id is None
    ):
        return None
    content = terminal_content(
        workflow_message_id=run.terminal_message_id,
        run_id=run.run_id,
        facts=run.terminal_facts(earlier),
        fingerprint=run.terminal_fingerprint,
        instructions=run.effective_presentation_instructions,
    )
    return WorkflowMessage.create(
        run.terminal_message_id,
        run_id=run.run_id,
        target_session_id=run.origin_session_id,
        kind="terminal",
        source_id=terminal_source_id(run.run_id),
        content=content,
        actor=actor,
        now=now,
    )
