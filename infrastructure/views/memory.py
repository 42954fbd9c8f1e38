"""Views in process memory, for ``memory://`` stores: the same contract as the SQL stores."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from runledger.infrastructure.views.store import (
    EncodedRow,
    PageCommit,
    Scan,
    TrackingConflictError,
    TrackingState,
    ViewReaderBase,
    ViewStore,
)
from runledger.projections.base import Key, Projection, Table


class MemoryViewStore(ViewStore):
    """Views in process memory (for ``memory://`` stores)."""

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self._tables: dict[str, dict[Key, EncodedRow]] = {}
        self._tracking: dict[str, TrackingState] = {}

    def ensure(self, projection: Projection) -> TrackingState:
        with self._lock:
            state = self._tracking.get(projection.name)
            if state is None or state.version != projection.version:
                self.reset(projection)
            return self._tracking[projection.name]

    def reset(self, projection: Projection, *, defer_indexes: bool = False) -> None:  # noqa: ARG002 - memory has no indexes
        with self._lock:
            for table in projection.tables:
                self._tables[table.name] = {}
            self._tracking[projection.name] = TrackingState(
                projection.name, projection.version, 0, None
            )

    def tracking(self) -> list[TrackingState]:
        with self._lock:
            return list(self._tracking.values())

    def fetch(self, table: Table, key: Key) -> EncodedRow | None:
        with self._lock:
            row = self._tables.get(table.name, {}).get(key)
            return None if row is None else dict(row)

    def commit(self, pages: Sequence[PageCommit]) -> None:
        self._commit(pages)

    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        del cursor  # the log's lock, held by the caller, is memory's transaction
        try:
            self._commit(pages)
        except TrackingConflictError:
            return False
        return True

    def _commit(self, pages: Sequence[PageCommit]) -> None:
        with self._lock:
            for page in pages:
                state = self._tracking[page.projection.name]
                if state.position != page.expected_position:
                    raise TrackingConflictError(state.name, page.expected_position, state.position)
            for page in pages:
                for table_name, changes in page.changes.items():
                    rows = self._tables.setdefault(table_name, {})
                    for key, row in changes.items():
                        if row is None:
                            rows.pop(key, None)
                        else:
                            rows[key] = dict(row)
                state = self._tracking[page.projection.name]
                self._tracking[state.name] = TrackingState(
                    state.name, state.version, page.new_position, None
                )

    def record_error(self, name: str, error: str | None) -> None:
        with self._lock:
            state = self._tracking[name]
            self._tracking[name] = TrackingState(name, state.version, state.position, error)

    def reader(self) -> ViewReaderBase:
        return _MemoryReader(self)


class _MemoryReader(ViewReaderBase):
    def __init__(self, store: MemoryViewStore) -> None:
        self._store = store

    def _rows(self, table: Table) -> list[EncodedRow]:
        with self._store._lock:
            return [dict(row) for row in self._store._tables.get(table.name, {}).values()]

    def _get(self, table: Table, key: Key) -> EncodedRow | None:
        return self._store.fetch(table, key)

    def _scan(self, scan: Scan) -> Sequence[EncodedRow]:
        rows = [
            row
            for row in self._rows(scan.table)
            if all(row[name] == value for name, value in scan.equals.items())
            and all(row[name] in values for name, values in scan.within.items())
        ]
        order_by, after = scan.order_by, scan.after
        if order_by is not None:
            rows.sort(key=lambda row: row[order_by], reverse=scan.descending)
            if after is not None:
                rows = [
                    row
                    for row in rows
                    if (row[order_by] < after if scan.descending else row[order_by] > after)
                ]
        return rows[: scan.limit] if scan.limit is not None else rows

    def _count(self, scan: Scan) -> int:
        return len(self._scan(scan))
