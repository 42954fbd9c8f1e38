"""What commands put into a session's outbox and prove in its branch, across aggregates.

Follow-ups (upstream §4.2, §4.3), host messages (§5.4), branch reports and turns (§5.4): each
rule in its upstream order, for the application's commands and the bench's generated
histories alike. Arguments have passed the commands' own checks before these run.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from runledger.domain.aggregates import Aggregates
from runledger.domain.errors import (
    RunMissingError,
    SentFollowUpRemovalError,
    TurnIdentityConflictError,
    UnknownBranchMessageError,
)
from runledger.domain.follow_ups import FollowUp, follow_up_aggregate_id
from runledger.domain.ids import default_turn_id, follow_up_id_for, follow_up_message_id
from runledger.domain.runs import Run
from runledger.domain.turn_reservations import TurnReservation, turn_aggregate_id
from runledger.domain.values import Actor, HostMessageKind, MessageKind
from runledger.domain.workflow_messages import (
    WorkflowMessage,
    follow_up_content,
    message_aggregate_id,
)


class Queued(NamedTuple):
    """The queued follow-up, and whether it was an earlier, identical request (adopted)."""

    follow_up: FollowUp
    adopted: bool


def queue_follow_up(
    aggregates: Aggregates,
    run_id: object,
    *,
    request_id: str,
    target_session_id: object,
    actor: Actor,
    source: str,
    prompt: str,
    now: datetime,
) -> Queued:
    """Upstream §4.2 steps 5-7: adopt the same request, else the run must take it."""
    if not isinstance(run_id, str):
        raise RunMissingError(run_id)
    follow_up_id = follow_up_id_for(run_id, request_id)
    prior = aggregates.get_or_assume_new(FollowUp, follow_up_aggregate_id(follow_up_id))
    if prior is not None:
        # Adoption comes before the status check: a retry after the run ended
        # still gets its original answer, whatever has happened to it since.
        prior.check_same_request(
            target_session_id=target_session_id, actor=actor, source=source, prompt=prompt
        )
        return Queued(prior, adopted=True)
    run = aggregates.run(run_id)
    follow_up, message = _accept_follow_up(
        run,
        follow_up_id,
        request_id=request_id,
        target_session_id=run.check_accepts_follow_up_for(target_session_id),
        actor=actor,
        source=source,
        prompt=prompt,
        now=now,
    )
    aggregates.add(follow_up)
    aggregates.add(message)
    return Queued(follow_up, adopted=False)


def _accept_follow_up(
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


def remove_follow_up(
    aggregates: Aggregates,
    run_id: object,
    follow_up_id: object,
    *,
    actor: Actor,
    source: str,
    now: datetime,
) -> FollowUp:
    """Upstream §4.3 steps 2-8; removal checks neither run status nor session (decision 6)."""
    follow_up = aggregates.follow_up(follow_up_id)
    follow_up.check_part_of(run_id)
    if follow_up.state == "removed":
        # Removing again answers with the removal, without an authority check.
        return follow_up
    follow_up.check_removable_by(actor, source)
    message = aggregates.message(follow_up.workflow_message_id)
    if message.is_sent:
        raise SentFollowUpRemovalError()
    follow_up.remove(actor=actor, source=source, now=now)
    message.cancel_if_pending(actor=actor, now=now)
    return follow_up


def create_host_message(
    aggregates: Aggregates,
    run_id: object,
    workflow_message_id: str,
    *,
    kind: HostMessageKind,
    source_id: str,
    content: dict[str, Any],
    actor: Actor,
    now: datetime,
) -> WorkflowMessage:
    """Upstream §5.4 create, for the run's origin session: the same message again is adopted."""
    run = aggregates.run(run_id)
    target_session_id = run.required_origin_session()
    existing = aggregates.get(WorkflowMessage, message_aggregate_id(workflow_message_id))
    if existing is not None:
        existing.check_same_creation(
            run_id=run.run_id,
            target_session_id=target_session_id,
            kind=kind,
            source_id=source_id,
            content=content,
        )
        return existing
    message = WorkflowMessage.create(
        workflow_message_id,
        run_id=run.run_id,
        target_session_id=target_session_id,
        kind=kind,
        source_id=source_id,
        content=content,
        actor=actor,
        now=now,
    )
    return aggregates.add(message)


def cancel_pending_for_source(
    aggregates: Aggregates,
    source_id: str,
    *,
    kind: MessageKind | None,
    actor: Actor,
    now: datetime,
) -> int:
    """Upstream cancelPendingForSource: sent and cancelled messages stay; returns how many."""
    cancelled = 0
    for message in aggregates.messages_of_source(source_id):
        if kind is None or message.kind == kind:
            cancelled += message.cancel_if_pending(actor=actor, now=now)
    return cancelled


def adopt_branch(
    aggregates: Aggregates,
    session_id: object,
    entries: list[tuple[str, str]],
    allowed_ids: frozenset[str],
    *,
    now: datetime,
) -> list[WorkflowMessage]:
    """Upstream adoptBranch, entry by entry: the only way a message becomes ``sent``."""
    actor = Actor.of_session(session_id)
    adopted: list[WorkflowMessage] = []
    for message_id, entry_id in entries:
        if message_id not in allowed_ids:
            raise UnknownBranchMessageError(message_id)
        message = aggregates.message(message_id)
        message.check_branch_session(session_id)
        message.adopt_entry(entry_id, actor=actor, now=now)
        adopted.append(message)
    return adopted


def start_turn(
    aggregates: Aggregates,
    workflow_message_id: object,
    *,
    run_id: object,
    target_session_id: object,
    workflow_turn_id: str | None,
    now: datetime,
) -> tuple[WorkflowMessage, str]:
    """Start the turn a sent message triggered; a known turn id must name the same turn."""
    if workflow_turn_id is not None:
        reserved = aggregates.get(TurnReservation, turn_aggregate_id(workflow_turn_id))
        if reserved is not None:
            if not reserved.matches(
                workflow_message_id=workflow_message_id,
                run_id=run_id,
                target_session_id=target_session_id,
            ):
                raise TurnIdentityConflictError(workflow_turn_id)
            return aggregates.message(workflow_message_id), workflow_turn_id
    message = aggregates.message(workflow_message_id)
    message.check_turn_identity(run_id=run_id, target_session_id=target_session_id)
    turn_id = workflow_turn_id or default_turn_id(
        message.workflow_message_id, len(message.turn_ids) + 1
    )
    actor = Actor.of_session(target_session_id)
    message.start_turn(turn_id, actor=actor, now=now)
    aggregates.add(
        TurnReservation.reserve(
            turn_id,
            workflow_message_id=message.workflow_message_id,
            run_id=message.run_id,
            target_session_id=message.target_session_id,
            actor=actor,
            now=now,
        )
    )
    return message, turn_id
