"""``verify_run``: replay a run's aggregates and re-project its read models from scratch,
then compare the re-projected rows with the stored ones.

A read-model row of one run can depend on events of any run of its tree (a settings scope
moves to a continuation child, a bad end cancels its ancestors' follow-ups), so the whole tree
is replayed and re-projected, and every row the tree owns (by its table's ``owner`` column)
is compared. Columns numbered across a session (a table's ``session_order``) depend on other
trees' messages too, so they are compared as an order, not as numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from runledger.domain.canonical import canonical_json
from runledger.domain.records import AuditDifference, AuditVerdict
from runledger.infrastructure.audit.lineage import audited_run, tree_runs
from runledger.infrastructure.audit.replay import replay_aggregates
from runledger.infrastructure.audit.reprojection import reproject
from runledger.infrastructure.audit.stored_events import log_entry, run_notifications
from runledger.infrastructure.collector import collector_paused
from runledger.infrastructure.runtime import StoreRuntime
from runledger.projections.base import Key, Projection, Row, Table, ViewReader


def verify_run_models(runtime: StoreRuntime, run_id: str) -> AuditVerdict:
    """Replay and re-project the run's tree; the verdict names the first difference."""
    with collector_paused():
        return _verify(runtime, run_id)


def _verify(runtime: StoreRuntime, run_id: str) -> AuditVerdict:
    run = audited_run(runtime, run_id)
    tree = tree_runs(runtime, run)
    head = runtime.storage.max_position()
    notifications = list(run_notifications(runtime.storage, tree, up_to=head))
    aggregates = replay_aggregates(runtime.app, notifications)
    projections = [runtime.projector.runner(name).projection for name in runtime.projection_names()]
    fresh = reproject((log_entry(n) for n in notifications), projections)
    difference = None
    for projection in projections:
        stall = fresh.stalls.get(projection.name)
        if stall is not None:
            # Re-projecting the run's own events failed: a row the live model holds cannot
            # be what these events give, so it is a difference, named by the failure.
            difference = AuditDifference(
                model=projection.name, table="", key=[], expected={"stalled": stall}, stored=None
            )
            break
        stored = runtime.reader(projection.name)
        difference = first_difference(projection, tree, fresh.reader(), stored)
        if difference is not None:
            break
    return AuditVerdict(
        run_id=run.run_id,
        ok=difference is None,
        runs=tree,
        events=len(notifications),
        aggregates=aggregates,
        models=[projection.name for projection in projections],
        difference=difference,
    )


def first_difference(
    projection: Projection, tree: Sequence[str], fresh: ViewReader, stored: ViewReader
) -> AuditDifference | None:
    for table in projection.tables:
        owner = table.owner
        if owner is None:
            continue
        expected = _owned(fresh, table, owner, tree)
        found = _owned(stored, table, owner, tree)
        session_wide = table.session_order
        ignored = () if session_wide is None else (session_wide[1],)
        for key in sorted(expected.keys() | found.keys(), key=_key_order):
            want, have = expected.get(key), found.get(key)
            if want is None or have is None or _without(want, ignored) != _without(have, ignored):
                return AuditDifference(
                    model=projection.name,
                    table=table.name,
                    key=list(key),
                    expected=want,
                    stored=have,
                )
        if session_wide is not None:
            difference = _order_difference(projection, table, session_wide, expected, found)
            if difference is not None:
                return difference
    return None


def _owned(reader: ViewReader, table: Table, owner: str, tree: Sequence[str]) -> dict[Key, Row]:
    rows = reader.scan(table, within={owner: list(tree)})
    return {table.key_of(row): row for row in rows}


def _key_order(key: Key) -> str:
    return canonical_json(list(key))


def _without(row: Row, columns: Sequence[str]) -> Row:
    return {name: value for name, value in row.items() if name not in columns}


def _order_difference(
    projection: Projection,
    table: Table,
    session_wide: tuple[str, str],
    expected: Mapping[Key, Row],
    found: Mapping[Key, Row],
) -> AuditDifference | None:
    """The tree's rows must come in the same order within each session, live and fresh."""
    session_column, order_column = session_wide
    want, have = (
        _orders(expected, session_column, order_column),
        _orders(found, session_column, order_column),
    )
    for session in sorted(want.keys() | have.keys()):
        if want.get(session) != have.get(session):
            return AuditDifference(
                model=projection.name,
                table=table.name,
                key=[session],
                expected={order_column: want.get(session)},
                stored={order_column: have.get(session)},
            )
    return None


def _orders(rows: Mapping[Key, Row], session_column: str, order_column: str) -> dict[str, Any]:
    by_session: dict[str, list[tuple[int, list[Any]]]] = {}
    for key, row in rows.items():
        by_session.setdefault(row[session_column], []).append((row[order_column], list(key)))
    return {session: [key for _, key in sorted(items)] for session, items in by_session.items()}
