"""How a run ends: its ``run.finished``, the cascade a bad end sets off, its terminal message.

``finish_run`` and ``interrupt_run`` both end a run here, and so do the bench's generated
histories: upstream §4.6 and §5.6 with DESIGN decisions 1, 2 and 8, in one place.
"""

from __future__ import annotations

from datetime import datetime

from runledger.domain.aggregates import Aggregates
from runledger.domain.ids import terminal_message_id, terminal_source_id
from runledger.domain.lineage import ancestors, continuation_chain
from runledger.domain.runs import Run
from runledger.domain.values import (
    BAD_END_STATUSES,
    SYSTEM,
    Actor,
    BadEndStatus,
    JsonValue,
    TerminalStatus,
    is_one_of,
)
from runledger.domain.workflow_messages import WorkflowMessage, terminal_content


def finish_run(
    aggregates: Aggregates,
    run: Run,
    *,
    status: object,
    final_output: JsonValue,
    error: object,
    status_detail: object,
    actor: Actor,
    now: datetime,
) -> None:
    """End the run with the host's outcome; a run that already ended cannot end again."""
    terminal, error_text, detail = run.check_finish(
        status, error=error, status_detail=status_detail
    )
    _end(
        aggregates,
        run,
        status=terminal,
        final_output=final_output,
        error=error_text,
        status_detail=detail,
        interrupted=False,
        actor=actor,
        now=now,
    )


def interrupt_run(
    aggregates: Aggregates, run: Run, reason: str, *, actor: Actor, now: datetime
) -> None:
    """Fail a running run because its host stopped; any other run is left as it is."""
    if run.status != "running":
        return
    _end(
        aggregates,
        run,
        status="failed",
        final_output=None,
        error=reason,
        status_detail=None,
        interrupted=True,
        actor=actor,
        now=now,
    )


def _end(
    aggregates: Aggregates,
    run: Run,
    *,
    status: TerminalStatus,
    final_output: JsonValue,
    error: str | None,
    status_detail: str | None,
    interrupted: bool,
    actor: Actor,
    now: datetime,
) -> None:
    fingerprint = run.fingerprint_for(status, final_output, error, status_detail)
    run.finish(
        status=status,
        final_output=final_output,
        error=error,
        status_detail=status_detail,
        interrupted=interrupted,
        terminal_message_id=(
            terminal_message_id(run.run_id, fingerprint) if run.presents_terminal_message else None
        ),
        actor=actor,
        now=now,
    )
    if is_one_of(status, BAD_END_STATUSES):
        _cancel_follow_ups(aggregates, run, status, now=now)
    if run.terminal_message_id is not None:
        # Only a run that gets a presentation message needs its ancestors' outcomes.
        message = terminal_message(
            run, list(reversed(ancestors(run, aggregates))), actor=actor, now=now
        )
        if message is not None:
            aggregates.add(message)


def _cancel_follow_ups(
    aggregates: Aggregates, ended: Run, status: BadEndStatus, *, now: datetime
) -> None:
    """Upstream §4.6 with DESIGN decisions 1-2: this run and its continuation ancestors.

    A restart child's failure leaves its parent's follow-ups alone, and a follow-up whose
    message already reached the session is not cancelled after the fact.
    """
    reason = ended.error if ended.error is not None else f"Workflow ended with status {status}"
    chain = continuation_chain(ended, aggregates)
    for ancestor in chain[1:]:
        if ancestor.accepts_changes:
            # An ancestor that still takes follow-ups gets an event, so its version orders
            # this end against every queue on it, as the ended run's own version does.
            ancestor.record_continuation_ended(ended.run_id, status=status, actor=SYSTEM, now=now)
    for run in chain:
        # The Run's version orders this against every queue on it, so the index lists
        # every follow-up accepted before this end (a racing queue conflicts and retries).
        for follow_up in aggregates.follow_ups_of(run.run_id):
            if follow_up.state != "queued":
                continue
            message = aggregates.message(follow_up.workflow_message_id)
            if message.is_sent:
                continue
            follow_up.cancel(
                ended_run_id=ended.run_id, status=status, reason=reason, actor=SYSTEM, now=now
            )
            message.cancel_if_pending(actor=SYSTEM, now=now)


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
