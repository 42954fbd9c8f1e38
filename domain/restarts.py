"""Restarting an ended run: upstream §3.8's host rules with DESIGN decision 9, in order."""

from __future__ import annotations

from datetime import datetime
from itertools import chain
from typing import NamedTuple

from runledger.domain.aggregates import Aggregates
from runledger.domain.errors import (
    RepeatedTerminalOutcomeError,
    RestartRequiresTurnError,
    StaleTerminalResultError,
    StaleTerminalTurnError,
)
from runledger.domain.ids import restart_run_id
from runledger.domain.lineage import ancestors, check_run_id_unused
from runledger.domain.runs import Run
from runledger.domain.values import Actor
from runledger.domain.workflow_messages import WorkflowMessage


class Restart(NamedTuple):
    """The restart child, and whether it existed already (then nothing was written)."""

    child: Run
    adopted: bool


def restart_run(
    aggregates: Aggregates,
    source: Run,
    *,
    session_id: object,
    workflow_message_id: object,
    workflow_turn_id: object,
    now: datetime,
) -> Restart:
    """Queue a fresh run of the source's approved input, bound to the requesting session.

    The child is ``queued`` until ``record_progress(status="running")``; an existing restart
    child is adopted before the same-outcome rule is checked (decision 9).
    """
    message, turn_id = check_terminal_turn(
        aggregates,
        source,
        session_id=session_id,
        workflow_message_id=workflow_message_id,
        workflow_turn_id=workflow_turn_id,
    )
    if source.restart_child_id is not None:
        return Restart(aggregates.run(source.restart_child_id), adopted=True)
    fingerprint = source.terminal_fingerprint
    check_outcome_is_new(aggregates, source)
    # Rule 11: the child's id comes from the terminal message, so a retry finds the same one.
    child_id = restart_run_id(message.workflow_message_id)
    check_run_id_unused(aggregates, child_id)
    actor = Actor.of_session(session_id)
    # The source's origin session is the requesting one, in interactive mode (checked above).
    child = aggregates.add(
        Run.reserve_child(
            child_id,
            parent=source,
            lineage_kind="restart",
            parent_terminal_fingerprint=fingerprint,
            actor=actor,
            now=now,
        )
    )
    source.record_restart_child(
        child_id,
        workflow_message_id=message.workflow_message_id,
        workflow_turn_id=turn_id,
        actor=actor,
        now=now,
    )
    return Restart(child, adopted=False)


def check_outcome_is_new(aggregates: Aggregates, source: Run) -> None:
    """Rule 9: no run with the source's root already restarted from the same terminal facts
    (a sibling's or another branch's restart counts as much as an ancestor's).

    The tree's restart children come from the store's index (``restarts_in_tree``), read
    whole: O(restarts in the tree). Runs written before that index existed are not in it, so
    the source's own line is walked too.
    """
    fingerprint = source.terminal_fingerprint
    line = [source, *ancestors(source, aggregates)]
    restarts = aggregates.restarts_in_tree(source.root_run_id)
    if any(run.parent_terminal_fingerprint == fingerprint for run in chain(line, restarts)):
        raise RepeatedTerminalOutcomeError()


def check_terminal_turn(
    aggregates: Aggregates,
    source: Run,
    *,
    session_id: object,
    workflow_message_id: object,
    workflow_turn_id: object,
) -> tuple[WorkflowMessage, str]:
    """Rules 2-5 and 7: the source's latest terminal message, sent, and its model turn.

    The requesting session owns the interactive run, which may still be restarted; the
    message is the run's latest terminal message, it reached that session, and the turn it
    triggered is the one named (when one is named).
    """
    source.check_restartable_by(session_id)
    if source.terminal_message_id != workflow_message_id:
        raise StaleTerminalResultError()
    message = aggregates.message(workflow_message_id)
    if message.target_session_id != session_id or not message.is_sent:
        raise StaleTerminalResultError()
    turn_id = message.latest_turn_id
    if turn_id is None:
        raise RestartRequiresTurnError()
    if workflow_turn_id is not None and workflow_turn_id != turn_id:
        raise StaleTerminalTurnError()
    return message, turn_id
