"""Where a read model keeps log positions: the same events at other positions give the same
rows but for the columns each table declares (``Table.positions``), which hold the positions
moved alike. A restore relies on it: it checks the live rows of a tree back at new positions
against the re-projection that verified its bundle at the old ones, those columns moved."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.domain.ports import LogEntry
from runledger.infrastructure import open_store
from runledger.infrastructure.audit.reprojection import reproject
from runledger.infrastructure.audit.restore import _AtNewPositions
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import default_projections
from runledger.projections.base import ColumnType, Table
from runledger.projections.runs import RUNS
from tests.support.audit import play_demo


def moved(position: int) -> int:
    """Other positions in the same order, with gaps, as a restore's are."""
    return 3 * position + 1_000


def logged_entries() -> list[LogEntry]:
    """The demo's story and a generated history, as the log holds them."""
    with open_store("memory://") as store:
        play_demo(store)
        runtime: Any = store._runtime
        for batch in HistoryGenerator(prefix="moved", delivered=True).batches(600):
            runtime.storage.events.insert_events(batch)
        return list(runtime.storage.read_log(after=0, limit=1_000_000))


def test_the_same_events_at_other_positions_differ_only_in_the_declared_position_columns() -> None:
    entries = logged_entries()
    projections = default_projections()
    here = reproject(entries, projections)
    there = reproject([e._replace(position=moved(e.position)) for e in entries], projections)
    assert not here.stalls
    assert not there.stalls

    declared = 0
    for projection in projections:
        for table in projection.tables:
            rows = {table.key_of(row): row for row in here.reader().scan(table)}
            elsewhere = {table.key_of(row): row for row in there.reader().scan(table)}
            assert rows.keys() == elsewhere.keys(), table.name
            for key, row in rows.items():
                expected = {
                    name: moved(value) if name in table.positions else value
                    for name, value in row.items()
                }
                assert elsewhere[key] == expected, (table.name, key)
            declared += bool(rows) and len(table.positions)
    # The runs list's and the session outbox's creation positions, each with rows to move.
    assert declared == 2


def test_a_position_column_is_an_int_column_of_the_table() -> None:
    columns: tuple[tuple[str, ColumnType], ...] = (
        ("run_id", "text"),
        ("position", "int"),
        ("created_at", "text"),
    )
    with pytest.raises(ValueError, match="unknown columns: \\['created'\\]"):
        Table("t", columns, ("run_id",), owner="run_id", positions=("created",))
    with pytest.raises(ValueError, match="a position column holds an int"):
        Table("t", columns, ("run_id",), owner="run_id", positions=("created_at",))


def test_a_query_on_a_moved_position_column_is_refused() -> None:
    """Its values are the positions before the move: a condition or an order on them would
    select other rows than the log's positions do."""
    with open_store("memory://") as store:
        store.create_run("run-1", workflow_name="w", input={})
        runtime: Any = store._runtime
        fresh = reproject(runtime.storage.read_log(after=0, limit=10), default_projections())
    at_new = _AtNewPositions(fresh.reader(), {1: 7})

    [row] = at_new.scan(RUNS, within={"run_id": ["run-1"]})
    assert row["position"] == 7
    assert at_new.count(RUNS) == 1
    with pytest.raises(ValueError, match="moved position column"):
        at_new.scan(RUNS, order_by="position")
    with pytest.raises(ValueError, match="moved position column"):
        at_new.count(RUNS, equals={"position": 7})
