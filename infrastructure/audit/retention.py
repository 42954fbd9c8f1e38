"""Retention's first half: find the settled run trees and archive each to a verified bundle.

A tree is judged from its aggregates as their events leave them (consistent reads, not read
models that may lag), and the judgement records each aggregate's last version. The bundle
written afterwards must hold exactly those versions: a command that wrote to the tree in
between makes it a kept tree (``changed-while-archiving``), never an archive of something
other than what was judged.
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any
from uuid import UUID

import orjson
from eventsourcing.domain import BaseAggregate
from eventsourcing.persistence import Notification

from runledger.domain.application import A, WorkflowRuns, of_kind
from runledger.domain.cached_aggregates import mutated
from runledger.domain.errors import (
    ArchiveNotVerifiedError,
    InvalidArchiveFolderError,
    InvalidCutoffError,
    InvalidPageError,
)
from runledger.domain.follow_ups import FollowUp
from runledger.domain.records import ArchivedTree, KeptTree, RunSummary
from runledger.domain.retention import KeepReason, aggregate_keep_reason, run_keep_reason
from runledger.domain.runs import Run, run_aggregate_id
from runledger.domain.values import TERMINAL_STATUSES, is_count
from runledger.domain.workflow_messages import WorkflowMessage, message_aggregate_id
from runledger.infrastructure.audit.bundle import export_bundle
from runledger.infrastructure.audit.bundle_format import HEADS
from runledger.infrastructure.audit.stored_events import aggregate_text, run_notifications
from runledger.infrastructure.audit.verify_bundle import verify_bundle
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.storage.base import as_uuid
from runledger.projections import runs as runs_model

_PAGE = 1000


@dataclass(frozen=True)
class SettledTree:
    """A tree judged prunable: its runs, and each aggregate's last version when judged."""

    root_run_id: str
    run_ids: list[str]
    versions: dict[str, int]
    events: int
    judged_at: int = 0
    """The log's head before the tree was judged (its runs were listed before that)."""


def check_cutoff(settled_before: object) -> datetime:
    """The cutoff, an aware datetime: a naive one would compare by the machine's zone."""
    if not isinstance(settled_before, datetime) or settled_before.utcoffset() is None:
        raise InvalidCutoffError(value=settled_before)
    return settled_before


def run_trees(runtime: StoreRuntime) -> Iterator[tuple[list[RunSummary], int]]:
    """Each run tree's runs as the runs list shows them (its root first), trees in their
    roots' creation order; with the log position the list had reached before its runs
    were read (a run created in the tree after it is not among them).

    A prune removes trees between two pages, so the next page starts after the last run of
    this one that is still listed (a kept tree's), or where this page started if none is."""
    reader = runtime.reader(runs_model.RunsProjection.name)
    after: str | None = None
    while True:
        page = runs_model.list_runs(reader, after=after, limit=_PAGE)
        for summary in page.runs:
            if summary.parent_run_id is None:
                listed_at = _runs_position(runtime)
                yield [summary, *_descendants(runtime, summary.run_id)], listed_at
        if page.next_after is None:
            return
        still = runs_model.runs_by_id(reader, [run.run_id for run in page.runs])
        if still:
            after = still[-1].run_id


def _runs_position(runtime: StoreRuntime) -> int:
    """Where the runs list is in the log (every process's commits up to there are in it)."""
    for state in runtime.views.tracking():
        if state.name == runs_model.RunsProjection.name:
            return state.position
    return 0


def _descendants(runtime: StoreRuntime, root_run_id: str) -> list[RunSummary]:
    reader = runtime.reader(runs_model.RunsProjection.name)
    found: list[RunSummary] = []
    after: str | None = None
    while True:
        page = runs_model.list_runs(reader, root_run_id=root_run_id, after=after, limit=_PAGE)
        found.extend(run for run in page.runs if run.run_id != root_run_id)
        if page.next_after is None:
            return found
        after = page.next_after


def _listed_keep_reason(
    runs: list[RunSummary], settled_before: datetime
) -> tuple[KeepReason, str] | None:
    """The first reason the runs list already shows: most trees of a large store are recent,
    and this keeps them without replaying a single aggregate."""
    for run in runs:
        if run.status not in TERMINAL_STATUSES or run.finished_at is None:
            return "run-not-ended", f"run {run.run_id} is {run.status}"
        if run.finished_at >= settled_before:
            return (
                "finished-after-cutoff",
                f"run {run.run_id} finished at {run.finished_at.isoformat()}",
            )
    return None


def judge_tree(
    runtime: StoreRuntime, run_ids: list[str], *, settled_before: datetime
) -> SettledTree | KeptTree:
    """The tree as prunable, or kept with the first reason: its runs first, in creation
    order, then the other aggregates in the order their first events were logged.

    Every aggregate is replayed from the tree's events, read once: each loaded alone cost
    a query of its own, most of a judgement (a prune of 220 trees on PostgreSQL)."""
    app = runtime.app
    now = app.now()
    root = run_ids[0]
    notifications = list(run_notifications(runtime.storage, run_ids))
    aggregates = _replayed(app, notifications)
    for run_id in run_ids:
        run = _aggregate(app, aggregates, Run, run_aggregate_id(run_id))
        if run is None:
            # Listed by the runs read model but without events: not something to prune.
            return KeptTree(
                root_run_id=root,
                run_ids=run_ids,
                reason="run-not-ended",
                detail=f"run {run_id} has no events",
            )
        reason = run_keep_reason(run, settled_before=settled_before, now=now)
        if reason is not None:
            return KeptTree(root_run_id=root, run_ids=run_ids, reason=reason[0], detail=reason[1])
    versions: dict[str, int] = {}
    for notification in notifications:
        versions[aggregate_text(notification.originator_id)] = notification.originator_version
    runs = {str(run_aggregate_id(run_id)) for run_id in run_ids}
    for aggregate_id in versions:
        if aggregate_id in runs:
            continue
        aggregate = _aggregate(app, aggregates, BaseAggregate, UUID(aggregate_id))
        reason = None if aggregate is None else aggregate_keep_reason(aggregate)
        if (
            isinstance(aggregate, FollowUp)
            and reason is not None
            and _delivered(app, aggregates, aggregate)
        ):
            reason = None
        if reason is not None:
            return KeptTree(root_run_id=root, run_ids=run_ids, reason=reason[0], detail=reason[1])
    return SettledTree(
        root_run_id=root, run_ids=run_ids, versions=versions, events=len(notifications)
    )


def _replayed(app: WorkflowRuns, notifications: list[Notification]) -> dict[UUID, Any]:
    """The aggregates whose every event is among ``notifications`` (versions 1 on, none
    missing), replayed from them; any other is left to ``_aggregate``'s load."""
    events: dict[UUID, list[Notification]] = {}
    for notification in notifications:
        events.setdefault(as_uuid(notification.originator_id), []).append(notification)
    replayed: dict[UUID, Any] = {}
    for aggregate_id, stored in events.items():
        if [n.originator_version for n in stored] != list(range(1, len(stored) + 1)):
            continue
        replayed[aggregate_id] = mutated(None, [app.mapper.to_domain_event(n) for n in stored])
    return replayed


def _aggregate(
    app: WorkflowRuns, replayed: dict[UUID, Any], cls: type[A], aggregate_id: UUID
) -> A | None:
    """``app.load`` of the aggregate, from ``replayed`` where the tree's events hold it."""
    aggregate = replayed.get(aggregate_id)
    if aggregate is None:
        return app.load(cls, aggregate_id)
    return of_kind(aggregate, cls)


def _delivered(app: WorkflowRuns, replayed: dict[UUID, Any], follow_up: FollowUp) -> bool:
    """Whether the follow-up's message was sent: a follow-up stays ``queued`` for good once
    delivered (only removal or cancellation change its state), so its message tells."""
    message = _aggregate(
        app, replayed, WorkflowMessage, message_aggregate_id(follow_up.workflow_message_id)
    )
    return message is not None and message.status != "pending"


def judged_trees(
    runtime: StoreRuntime, *, settled_before: object, limit: object = None
) -> Iterator[SettledTree | KeptTree]:
    """Each tree in its root's creation order, judged as it comes (settled trees up to
    ``limit``): a prune takes each settled tree before the next is judged, so what it holds
    does not grow with the number of trees."""
    cutoff = check_cutoff(settled_before)
    if limit is not None and not is_count(limit):
        raise InvalidPageError("prune limit")
    settled = 0
    for runs, listed_at in run_trees(runtime):
        if limit is not None and settled >= limit:
            return
        run_ids = [run.run_id for run in runs]
        listed = _listed_keep_reason(runs, cutoff)
        if listed is not None:
            yield KeptTree(
                root_run_id=run_ids[0], run_ids=run_ids, reason=listed[0], detail=listed[1]
            )
            continue
        # The runs list can lag behind the log (a store whose worker projects), so a tree it
        # shows as settled is judged again from the aggregates themselves.
        verdict = judge_tree(runtime, run_ids, settled_before=cutoff)
        if isinstance(verdict, SettledTree):
            settled += 1
            yield dataclasses.replace(verdict, judged_at=listed_at)
        else:
            yield verdict


def plan_prune(
    runtime: StoreRuntime, *, settled_before: object, limit: object = None
) -> tuple[list[SettledTree], list[KeptTree]]:
    """The settled trees (at most ``limit``) and every tree kept before the last of them."""
    settled: list[SettledTree] = []
    kept: list[KeptTree] = []
    for verdict in judged_trees(runtime, settled_before=settled_before, limit=limit):
        if isinstance(verdict, SettledTree):
            settled.append(verdict)
        else:
            kept.append(verdict)
    return settled, kept


def archive_folder(archive: object) -> Path:
    """The archive folder, which must exist: retention never guesses where bundles go."""
    # An empty path would be the working folder: retention never guesses where bundles go.
    if not isinstance(archive, (str, os.PathLike)) or not os.fspath(archive):
        raise InvalidArchiveFolderError(path=archive)
    folder = Path(os.fsdecode(archive))
    if not folder.is_dir():
        raise InvalidArchiveFolderError(path=str(folder))
    return folder


def bundle_name(root_run_id: str) -> str:
    """The tree's bundle file name: run ids may hold any text, so the name is their hash."""
    return f"tree-{hashlib.sha256(root_run_id.encode()).hexdigest()[:32]}.jsonl"


def archive_tree(runtime: StoreRuntime, tree: SettledTree, folder: Path) -> ArchivedTree | KeptTree:
    """Write the tree's bundle (with lineage), make it durable, read it back through
    ``verify_bundle``, and check it holds exactly the versions the tree was judged at."""
    path = folder / bundle_name(tree.root_run_id)
    export_bundle(runtime, tree.root_run_id, path, lineage=True)
    _fsync(path)
    verdict = verify_bundle(path)
    if not verdict.ok:
        raise ArchiveNotVerifiedError(
            path=str(path),
            root_run_id=tree.root_run_id,
            reason=f"{verdict.problem}: {verdict.detail}",
        )
    data = path.read_bytes()
    lines = data.rstrip(b"\n").split(b"\n")
    header, digests = orjson.loads(lines[0]), orjson.loads(lines[-1])
    archived = {aggregate: span["last"] for aggregate, span in header["aggregates"].items()}
    if archived != tree.versions or sorted(header["runs"]) != sorted(tree.run_ids):
        return KeptTree(
            root_run_id=tree.root_run_id,
            run_ids=tree.run_ids,
            reason="changed-while-archiving",
            detail="a command wrote to the tree after it was judged settled",
        )
    return ArchivedTree(
        root_run_id=tree.root_run_id,
        run_ids=tree.run_ids,
        events=verdict.events,
        bundle=str(path),
        bundle_sha256=hashlib.sha256(data).hexdigest(),
        versions=archived,
        chain_heads=header[HEADS],
        digests=digests["read_models"],
    )


def _fsync(path: Path) -> None:
    # The rename that put the bundle in place is durable only once its folder is synced.
    with path.open("rb") as file:
        os.fsync(file.fileno())
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)
    finally:
        os.close(folder)
