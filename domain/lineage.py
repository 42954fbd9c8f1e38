"""A run's lineage: new root and continuation runs, and the walks up a run's parents."""

from __future__ import annotations

from datetime import datetime
from typing import Final

from runledger.domain.aggregates import Aggregates
from runledger.domain.errors import (
    ContinuationChainTooDeepError,
    InvalidRunFieldError,
    ParentRunMissingError,
    RunAlreadyExistsError,
)
from runledger.domain.human_decisions import HumanDecision
from runledger.domain.ids import continuation_run_id_for
from runledger.domain.runs import Run
from runledger.domain.values import HOST, START_STATUSES, Actor, JsonValue, is_one_of

MAX_LINEAGE_DEPTH: Final = 100


def create_run(
    aggregates: Aggregates,
    run_id: str,
    *,
    workflow_name: object,
    input: JsonValue,
    workflow_ref: object,
    title: object,
    parent_run_id: object,
    status: object,
    actor: Actor,
    now: datetime,
) -> Run:
    """A root run, or a continuation child of ``parent_run_id`` (upstream §3.5 A, in order).

    ``run_id`` has passed ``check_run_id`` before the command started.
    """
    check_run_id_unused(aggregates, run_id)
    if not is_one_of(status, START_STATUSES):
        raise InvalidRunFieldError(field="status", expected="queued, running or waiting")
    parent = None
    if parent_run_id is not None:
        parent = aggregates.run(parent_run_id, missing=ParentRunMissingError)
    run = Run.create(
        run_id,
        workflow_name=workflow_name,
        input=input,
        workflow_ref=workflow_ref,
        title=title,
        status=status,
        parent=parent,
        lineage_kind=None if parent is None else "continuation",
        parent_terminal_fingerprint=None,
        actor=actor,
        now=now,
    )
    return _add_continuation(aggregates, run, parent, actor=actor, now=now)


def continue_after_decision(
    aggregates: Aggregates, decision: HumanDecision, run_id: str | None, *, now: datetime
) -> Run:
    """The accepted decision's continuation child, created with the receipt, or the existing one.

    The child is a continuation (lineage, root and restart number inherited, as in
    ``create_run``), reserved as upstream's host queue does.
    """
    decision.check_accepted()
    child_id = run_id or continuation_run_id_for(decision.decision_id)
    if decision.continued_into(child_id):
        return aggregates.run(child_id)
    check_run_id_unused(aggregates, child_id)
    parent = aggregates.run(decision.run_id)
    child = Run.reserve_child(
        child_id,
        parent=parent,
        lineage_kind="continuation",
        actor=HOST,
        now=now,
        human_decision=decision.receipt(),
    )
    _add_continuation(aggregates, child, parent, actor=HOST, now=now)
    decision.record_continuation(child_id, actor=HOST, now=now)
    return child


def _add_continuation(
    aggregates: Aggregates, run: Run, parent: Run | None, *, actor: Actor, now: datetime
) -> Run:
    """Add a new run; a continuation child takes every settings scope active on its parent.

    Upstream §3.6 with decisions 4 and 15: scopes travel with the run to its continuation
    (from a decision too), in the same commit as ``run.created``; a restart takes none.
    """
    aggregates.add(run)
    if parent is not None:
        for scope in list(aggregates.settings_scopes_active_on(parent.run_id)):
            scope.move_to(run.run_id, actor=actor, now=now)
    return run


def check_run_id_unused(aggregates: Aggregates, run_id: str) -> None:
    """A run id names one run for ever, whether a host or a restart chose it."""
    if aggregates.find_run(run_id) is not None:
        raise RunAlreadyExistsError(run_id)


def ancestors(run: Run, aggregates: Aggregates) -> list[Run]:
    """The run's ancestors through any lineage link, nearest first."""
    chain: list[Run] = []
    current = run
    while current.parent_run_id is not None and len(chain) < MAX_LINEAGE_DEPTH:
        current = aggregates.run(current.parent_run_id)
        chain.append(current)
    return chain


def continuation_chain(
    run: Run, aggregates: Aggregates, *, max_steps: int | None = None
) -> list[Run]:
    """The run and its continuation ancestors, nearest first: a restart link ends the chain.

    With ``max_steps`` the walk stops after that many parents.
    """
    chain = [run]
    current = run
    while current.continues_a_parent and (max_steps is None or len(chain) <= max_steps):
        current = aggregates.run(current.parent_run_id)
        chain.append(current)
    return chain


def continuation_origin(run: Run, aggregates: Aggregates) -> Run:
    """Upstream ``logicalOriginRunId`` with decision 19: the top of the continuation chain.

    The walk stops at a restart link (a restart child is its own origin) and takes at most
    ``MAX_LINEAGE_DEPTH`` steps: ``Workflow continuation chain is too deep for run <runId>``.
    """
    top = continuation_chain(run, aggregates, max_steps=MAX_LINEAGE_DEPTH)[-1]
    if top.continues_a_parent:
        raise ContinuationChainTooDeepError(run.run_id)
    return top
