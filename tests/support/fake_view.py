"""A dict-backed view for testing pure projections, and a way to feed it a store's log."""

from __future__ import annotations

import copy
from collections.abc import Collection, Mapping
from typing import Any

from runledger.infrastructure.commits.ports import EventStorage
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.projections.base import Key, Projection, Row, Table
from runledger.projections.events import projected
from tests.support.clock import FakeClock


class FakeView:
    """Implements both ViewWriter and ViewReader over plain dicts."""

    def __init__(self) -> None:
        self.tables: dict[str, dict[Key, Row]] = {}

    def get(self, table: Table, key: Key) -> Row | None:
        row = self.tables.get(table.name, {}).get(tuple(key))
        return copy.deepcopy(row)

    def put(self, table: Table, row: Row) -> None:
        missing = set(table.column_names) - set(row)
        extra = set(row) - set(table.column_names)
        if missing or extra:
            raise ValueError(f"{table.name}: missing {missing}, unknown {extra}")
        self.tables.setdefault(table.name, {})[table.key_of(row)] = copy.deepcopy(row)

    def delete(self, table: Table, key: Key) -> None:
        self.tables.get(table.name, {}).pop(tuple(key), None)

    def scan(
        self,
        table: Table,
        *,
        equals: Mapping[str, Any] | None = None,
        within: Mapping[str, Collection[Any]] | None = None,
        order_by: str | None = None,
        descending: bool = False,
        after: Any = None,
        limit: int | None = None,
    ) -> list[Row]:
        rows = [
            row
            for row in self.tables.get(table.name, {}).values()
            if all(row[name] == value for name, value in (equals or {}).items())
            and all(row[name] in values for name, values in (within or {}).items())
        ]
        if order_by is not None:
            rows.sort(key=lambda row: row[order_by], reverse=descending)
            if after is not None:
                rows = [
                    row
                    for row in rows
                    if (row[order_by] < after if descending else row[order_by] > after)
                ]
        return copy.deepcopy(rows[:limit] if limit is not None else rows)

    def count(self, table: Table, *, equals: Mapping[str, Any] | None = None) -> int:
        return len(self.scan(table, equals=equals))


def project_log(
    projection: Projection, storage: EventStorage, view: FakeView | None = None
) -> FakeView:
    """Apply every event of the store's log (that the projection consumes) to a fake view."""
    view = view or FakeView()
    for entry in storage.read_log(after=0, limit=10**9):
        event = projected(entry)
        if event.wire_name in projection.topics:
            projection.apply(event, view)
    return view


class StoreWithLog(WorkflowStore):
    """The public store plus the event storage under it, whose log a test projects itself."""

    __slots__ = ("storage",)

    def __init__(self, runtime: StoreRuntime) -> None:
        super().__init__(runtime)
        self.storage = runtime.storage


def open_memory_store_with_log() -> StoreWithLog:
    """A new memory store on a fake clock (close it, or use it as a context manager)."""
    return StoreWithLog(open_runtime("memory://", clock=FakeClock()))
