"""A row and a scan read together (``projections.base.get_and_scan``): what a queue's page
reads, the run's row and its follow-ups, in one round trip on PostgreSQL. Read together or
one after the other, a reader answers the same, on every backend."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from runledger.projections.base import PairedReader, Row, Table, ViewReader, get_and_scan
from runledger.projections.follow_up_queue import FOLLOW_UPS, RUNS, follow_up_queue_range
from tests.support import scenario

SESSION = "pi-paired"


class OneByOne:
    """A reader that cannot read a row and a scan together (a restore's reader, a fake)."""

    def __init__(self, reader: ViewReader) -> None:
        self.reader = reader

    def get(self, table: Table, key: Any) -> Row | None:
        return self.reader.get(table, key)

    def scan(self, table: Table, **query: Any) -> list[Row]:
        return self.reader.scan(table, **query)

    def count(self, table: Table, **query: Any) -> int:
        return self.reader.count(table, **query)


@pytest.fixture
def queued(store: WorkflowStore) -> list[str]:
    scenario.running_run(store, session_id=SESSION)
    return [scenario.queued_id(store, f"request-{n}", target_session_id=SESSION) for n in range(5)]


@pytest.mark.parametrize(
    ("run_id", "after", "limit"),
    [
        (scenario.RUN, None, None),
        (scenario.RUN, 2, 2),
        (scenario.RUN, 4, 10),
        (scenario.RUN, 5, 1),
        ("no-such-run", None, None),
        (7, 0, 1),  # a key no row can hold: neither read reaches the database
    ],
)
def test_read_together_a_row_and_a_scan_are_the_two_reads(
    runtime: StoreRuntime, queued: list[str], run_id: Any, after: int | None, limit: int | None
) -> None:
    reader = runtime.views.reader()
    assert isinstance(reader, PairedReader)
    query: dict[str, Any] = {"order_by": "order_number", "after": after, "limit": limit}

    row, rows = reader.get_and_scan(RUNS, (run_id,), FOLLOW_UPS, equals={"run_id": run_id}, **query)

    assert row == reader.get(RUNS, (run_id,))
    assert rows == reader.scan(FOLLOW_UPS, equals={"run_id": run_id}, **query)
    if run_id == scenario.RUN:
        assert row is not None
        assert row["origin_session_id"] == SESSION
        ids = [found["follow_up_id"] for found in rows]
        start = after or 0
        assert ids == queued[start : None if limit is None else start + limit]
    else:
        assert (row, rows) == (None, [])


def test_a_reader_that_cannot_pair_reads_one_after_the_other(
    runtime: StoreRuntime, queued: list[str]
) -> None:
    paired = runtime.views.reader()
    one_by_one = OneByOne(paired)
    assert not isinstance(one_by_one, PairedReader)

    assert get_and_scan(
        one_by_one, RUNS, (scenario.RUN,), FOLLOW_UPS, equals={"run_id": scenario.RUN}
    ) == get_and_scan(paired, RUNS, (scenario.RUN,), FOLLOW_UPS, equals={"run_id": scenario.RUN})
    page = follow_up_queue_range(one_by_one, scenario.RUN, start=1, limit=3)
    assert page == follow_up_queue_range(paired, scenario.RUN, start=1, limit=3)
    assert page is not None
    assert [f.follow_up_id for f in page.follow_ups] == queued[1:4]
