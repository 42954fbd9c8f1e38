"""Retention's second half: prune each settled run tree once its bundle verified.

For each tree ``plan_prune`` finds settled, ``archive_tree`` writes and verifies its bundle;
then ONE transaction (``storage.remove_tree``) appends its tombstone, checks the tree is what
the bundle holds, guards its ids, deletes its events and snapshots, and — through
``views_write`` here — deletes its rows from every read model's active and building slot and
moves each slot onto the tombstone. So a crash leaves the tree whole, or gone with its
tombstone and a verified bundle on disk.

Read models stay what a rebuild of the remaining log gives. Rows are removed by the column
that ties them to a run (``Table.owner``); numbers shared across trees are given again as a
rebuild gives them: a session's message order (``Table.session_order``) is closed up, and the
session's counter follows (``COUNTERS``). Every active slot must be at the log's head when the
tree is removed: moving it onto the tombstone is what tells every other process that its
cached rows are stale (its next page finds the slot moved, drops its cache and reads again).
A slot that lags is caught up first, and the removal tried again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Final
from uuid import UUID

from runledger.domain.records import (
    ArchivedTree,
    KeptTree,
    PrunableTree,
    PrunedTree,
    PruneReport,
)
from runledger.domain.run_tree_archives import RunTreeArchive, run_tree_lookup_key
from runledger.domain.values import SYSTEM
from runledger.infrastructure.audit.retention import (
    SettledTree,
    archive_folder,
    archive_tree,
    check_cutoff,
    judged_trees,
    plan_prune,
)
from runledger.infrastructure.audit.trail import check_flag
from runledger.infrastructure.commits.executor import forget_cached
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.storage.archived import (
    TreeChangedError,
    TreeRemoval,
    ViewsMovedError,
    ViewsWrite,
)
from runledger.infrastructure.views.rebuild import _Lock
from runledger.infrastructure.views.store import (
    PageCommit,
    TableChanges,
    TrackingState,
    ViewStore,
    encode_key,
    encode_row,
)
from runledger.projections import session_outbox
from runledger.projections.base import Key, Projection, Table

REMOVE_ATTEMPTS: Final = 10
"""Removals of one tree tried while its read models lag or move (then it is kept)."""

LOCK_LEASE_SECONDS: Final = 60.0

COUNTERS: Final[dict[str, tuple[Table, str]]] = {
    session_outbox.MESSAGES.name: (session_outbox.SESSIONS, "last_order"),
}
"""For a table numbered across a session (``Table.session_order``): the table counting the
numbers given in each session (keyed by the session) and its column."""

TreeProgress = Callable[[int], None]
"""Told of each tree done (archived or kept), for a progress bar."""


def prune_runs(
    runtime: StoreRuntime,
    *,
    settled_before: object,
    archive: object,
    limit: object = None,
    dry_run: object = False,
    progress: TreeProgress | None = None,
) -> PruneReport:
    """Archive and prune the settled run trees (at most ``limit``), or with ``dry_run`` only
    say which would go."""
    cutoff = check_cutoff(settled_before)
    # Absolute: the tombstone records where the bundle went, for whoever reads it later.
    folder = archive_folder(archive).resolve()
    dry = check_flag("dry_run", dry_run)
    if dry:
        settled, kept = plan_prune(runtime, settled_before=cutoff, limit=limit)
        prunable = [
            PrunableTree(root_run_id=tree.root_run_id, run_ids=tree.run_ids, events=tree.events)
            for tree in settled
        ]
        return _report(cutoff, dry=True, archived=[], prunable=prunable, kept=kept)
    judged = judged_trees(runtime, settled_before=cutoff, limit=limit)
    archived: list[PrunedTree] = []
    kept = []
    for name in runtime.projection_names():
        runtime._check_current(runtime.projector.runner(name))
    lock = _Lock(runtime.views, runtime.projection_names(), LOCK_LEASE_SECONDS)
    lock.take(wait=False)
    try:
        _drop_foreign_builds(runtime)
        # Held locks: no build starts, switches or ends meanwhile, so these stay the ones.
        building = [
            name for name in runtime.projection_names() if runtime.views.registry(name).building
        ]
        # Each tree is judged just before it is pruned (not all first): memory stays that of
        # one tree and the report's lines, whatever the store's history.
        for verdict in judged:
            if isinstance(verdict, KeptTree):
                kept.append(verdict)
                continue
            lock.renew()
            outcome = prune_tree(runtime, verdict, folder, building)
            if isinstance(outcome, ArchivedTree):
                archived.append(
                    PrunedTree(
                        root_run_id=outcome.root_run_id,
                        run_ids=outcome.run_ids,
                        events=outcome.events,
                        bundle=outcome.bundle,
                        bundle_sha256=outcome.bundle_sha256,
                    )
                )
            else:
                kept.append(outcome)
            if progress is not None:
                progress(1)
    finally:
        lock.release()
    return _report(cutoff, dry=False, archived=archived, prunable=[], kept=kept)


def _report(
    cutoff: datetime,
    *,
    dry: bool,
    archived: list[PrunedTree],
    prunable: list[PrunableTree],
    kept: list[KeptTree],
) -> PruneReport:
    gone: Sequence[PrunedTree | PrunableTree] = prunable if dry else archived
    return PruneReport(
        dry_run=dry,
        settled_before=cutoff,
        archived=archived,
        prunable=prunable,
        kept=kept,
        trees=len(gone),
        runs=sum(len(tree.run_ids) for tree in gone),
        events=sum(tree.events for tree in gone),
    )


def _drop_foreign_builds(runtime: StoreRuntime) -> None:
    """A building slot of another code version (its build paused, we hold its lock) holds
    rows this code cannot read: it is dropped, as the next build of it would do."""
    for name, runner in runtime.projector.runners.items():
        building = runtime.views.registry(name).building
        if building is not None and building.version != runner.projection.version:
            runtime.views.drop_slot(building)


def prune_tree(
    runtime: StoreRuntime, tree: SettledTree, folder: Path, building: Sequence[str] = ()
) -> ArchivedTree | KeptTree:
    """Archive one settled tree and remove it from the live store (or keep it, and why);
    ``building``: the projections with a building slot."""
    judged_at = tree.judged_at
    archived = archive_tree(runtime, tree, folder)
    if isinstance(archived, KeptTree):
        return archived
    removal = tree_removal(runtime, archived, judged_at)
    write = views_write(runtime, archived.run_ids, building)
    for _ in range(REMOVE_ATTEMPTS):
        # Commands of this process project their own events; a worker's store may lag.
        runtime.projector.catch_up()
        try:
            runtime.storage.remove_tree(removal, write)  # type: ignore[attr-defined]
        except TreeChangedError:
            return _changed(archived, "a command wrote to the tree after its bundle was written")
        except ViewsMovedError:
            continue
        break
    else:
        return _changed(archived, "the read models kept moving; run the prune again")
    forget_cached(runtime.app, [*removal.versions])
    # This process's projectors go on from the tombstone with empty caches, as every other
    # process's will once its next page finds the slots moved.
    with runtime.projector.paused():
        states = runtime.views.refresh()
        for name, runner in runtime.projector.runners.items():
            state = states.get(name)
            if state is not None and runner.slot is not None and state.slot == runner.slot.slot:
                runner.abandon(state.position)
    return archived


def _changed(archived: ArchivedTree, detail: str) -> KeptTree:
    return KeptTree(
        root_run_id=archived.root_run_id,
        run_ids=archived.run_ids,
        reason="changed-while-archiving",
        detail=detail,
    )


def tree_removal(runtime: StoreRuntime, archived: ArchivedTree, judged_at: int) -> TreeRemoval:
    """The tree's removal: what its bundle holds and the tombstone saying so."""
    app = runtime.app
    tombstone = RunTreeArchive.archive(
        archived.root_run_id,
        run_ids=archived.run_ids,
        events=archived.events,
        aggregates={
            aggregate_id: {"version": version, "chain_head": archived.chain_heads[aggregate_id]}
            for aggregate_id, version in archived.versions.items()
        },
        bundle=archived.bundle,
        bundle_sha256=archived.bundle_sha256,
        removed_digests={
            name: str(outcome.get("digest", ""))
            for name, outcome in archived.digests.items()
            if isinstance(outcome, dict)
        },
        actor=SYSTEM,
        now=app.now(),
    )
    [event] = tombstone.collect_events()
    # A tree restored and pruned again holds its earlier tombstones (they carry its root's
    # run id, so its bundle does too): history of the log, not of the tree, so they stay.
    earlier = set(runtime.storage.originator_ids_by_key(run_tree_lookup_key(archived.root_run_id)))
    versions = {UUID(aggregate): version for aggregate, version in archived.versions.items()}
    return TreeRemoval(
        run_ids=tuple(archived.run_ids),
        versions={key: version for key, version in versions.items() if key not in earlier},
        events=archived.events - sum(versions[key] for key in earlier if key in versions),
        tombstone=app.mapper.to_stored_event(event),
        root_run_id=archived.root_run_id,
        judged_at=judged_at,
    )


def views_write(
    runtime: StoreRuntime, run_ids: Sequence[str], building: Sequence[str] = ()
) -> ViewsWrite:
    """The read models' share of a tree's removal (``storage.archived.ViewsWrite``);
    ``building`` names the projections with a building slot (the rest have none)."""
    views = runtime.views
    projections = [runner.projection for runner in runtime.projector.runners.values()]

    def write(cursor: Any, head: int, tombstone: int) -> bool:
        pages: list[PageCommit] = []
        active = {state.name: state for state in views.tracking()}
        for projection in projections:
            if RunTreeArchive.Archived.TOPIC in projection.topics:
                # Moving it over the tombstone unread would lose what it makes of it.
                raise AssertionError(f"{projection.name} consumes tombstones")
            name = projection.name
            built = views.registry(name).building if name in building else None
            for slot in (active.get(name), built):
                if slot is None:
                    continue
                if slot.version != projection.version or (
                    slot.state == "active" and slot.position != head
                ):
                    return False
                pages.append(
                    PageCommit(
                        projection,
                        slot.position,
                        tombstone if slot.position == head else slot.position,
                        tree_changes(views, projection, slot, run_ids),
                        slot,
                    )
                )
        return views.write_with_events(cursor, pages)

    return write


def tree_changes(
    views: ViewStore, projection: Projection, slot: TrackingState, run_ids: Sequence[str]
) -> dict[str, TableChanges]:
    """The slot's row changes that take the tree out: its rows deleted, and each session's
    numbers closed up where the tree's rows left holes."""
    reader = views.reader({projection.name: slot})
    tables = {table.name: table for table in projection.tables}
    changes: dict[str, TableChanges] = {}
    for table in projection.tables:
        if table.owner is None:
            continue
        rows = reader.scan(table, within={table.owner: list(run_ids)})
        if not rows:
            continue
        gone: TableChanges = {encode_key(table, table.key_of(row)): None for row in rows}
        changes[table.name] = gone
        if table.session_order is None:
            continue
        session_column, order_column = table.session_order
        counter_table, counter_column = COUNTERS[table.name]
        counters = changes.setdefault(counter_table.name, {})
        for session in sorted({row[session_column] for row in rows}):
            left = [
                row
                for row in reader.scan(
                    table, equals={session_column: session}, order_by=order_column
                )
                if encode_key(table, table.key_of(row)) not in gone
            ]
            for order, row in enumerate(left, start=1):
                if row[order_column] != order:
                    row[order_column] = order
                    gone_or_kept: Key = encode_key(table, table.key_of(row))
                    changes[table.name][gone_or_kept] = encode_row(table, row)
            counter_key: Key = encode_key(counter_table, (session,))
            counters[counter_key] = (
                encode_row(counter_table, {session_column: session, counter_column: len(left)})
                if left
                else None
            )
        if counter_table.name not in tables:
            raise AssertionError(f"{counter_table.name} is not {projection.name}'s")
    return {name: rows for name, rows in changes.items() if rows}
