"""Views in process memory, for ``memory://`` stores and scratch replays: the same contract as
the SQL stores, slots, registry and build lock included."""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import AbstractContextManager
from typing import Any

from runledger.infrastructure.views.store import (
    EncodedRow,
    PageCommit,
    Registry,
    Scan,
    TrackingConflictError,
    TrackingState,
    ViewReaderBase,
    ViewStore,
)
from runledger.projections.base import Key, Projection, Table


@dataclasses.dataclass
class _Entry:
    """One projection's registry row."""

    active: int | None = None
    building: int | None = None
    next_slot: int = 1
    lock_owner: str | None = None


class MemoryViewStore(ViewStore):
    """Views in process memory (for ``memory://`` stores and scratch replays)."""

    def __init__(self, *, plain: bool = False) -> None:
        super().__init__()
        self.plain = plain
        self._lock = threading.RLock()
        self._tables: dict[str, dict[Key, EncodedRow]] = {}
        self._slots: dict[tuple[str, int], TrackingState] = {}
        self._registry: dict[str, _Entry] = {}

    def _new_slot(self, projection: Projection, state: str) -> TrackingState:
        entry = self._registry.setdefault(projection.name, _Entry())
        slot = TrackingState(
            projection.name,
            projection.version,
            0,
            None,
            slot=entry.next_slot,
            state=state,  # type: ignore[arg-type]
            tables=tuple(table.name for table in projection.tables),
        )
        entry.next_slot += 1
        self._slots[(projection.name, slot.slot)] = slot
        for table in projection.tables:
            self._tables[self.physical_name(table, slot)] = {}
        return slot

    def ensure(self, projection: Projection) -> TrackingState:
        with self._lock:
            entry = self._registry.setdefault(projection.name, _Entry())
            if entry.active is None:
                entry.active = self._new_slot(projection, "active").slot
            active = self._slots[(projection.name, entry.active)]
            self._known(projection, active)
            return active

    def registry(self, name: str) -> Registry:
        with self._lock:
            entry = self._registry.get(name, _Entry())
            return Registry(
                name,
                None if entry.active is None else self._slots[(name, entry.active)],
                None if entry.building is None else self._slots[(name, entry.building)],
                entry.lock_owner,
                None,
            )

    def begin_build(self, projection: Projection, *, restart: bool = False) -> TrackingState:
        with self._lock:
            entry = self._registry.setdefault(projection.name, _Entry())
            if entry.building is not None:
                building = self._slots[(projection.name, entry.building)]
                if not restart and building.version == projection.version:
                    return building
                entry.building = None
                self.drop_slot(building)
            slot = self._new_slot(projection, "building")
            entry.building = slot.slot
            return slot

    def switch(self, projection: Projection, building: TrackingState) -> TrackingState | None:
        with self._lock:
            entry = self._registry[projection.name]
            current = self._slots.get((projection.name, building.slot))
            if entry.building != building.slot or current is None:
                raise TrackingConflictError(projection.name, building.position, -1)
            retired = None
            if entry.active is not None:
                old = self._slots[(projection.name, entry.active)]
                retired = dataclasses.replace(old, state="retired")
                self._slots[(projection.name, old.slot)] = retired
            active = dataclasses.replace(current, state="active")
            self._slots[(projection.name, active.slot)] = active
            entry.active, entry.building = active.slot, None
            self._known(projection, active)
            return retired

    def drop_slot(self, slot: TrackingState) -> None:
        with self._lock:
            self._slots.pop((slot.name, slot.slot), None)
            entry = self._registry.get(slot.name)
            if entry is not None and entry.building == slot.slot:
                entry.building = None
            for name in slot.tables:
                self._tables.pop(self.physical_name(name, slot), None)

    def retired_slots(self, name: str) -> list[TrackingState]:
        with self._lock:
            return [s for (n, _), s in self._slots.items() if n == name and s.state == "retired"]

    def try_lock(self, name: str, owner: str, *, lease_seconds: float) -> str | None:  # noqa: ARG002 - one process: no lease to run out
        with self._lock:
            entry = self._registry.setdefault(name, _Entry())
            if entry.lock_owner not in (None, owner):
                return entry.lock_owner
            entry.lock_owner = owner
            return None

    def unlock(self, name: str, owner: str) -> None:
        with self._lock:
            entry = self._registry.get(name)
            if entry is not None and entry.lock_owner == owner:
                entry.lock_owner = None

    def tracking(self) -> list[TrackingState]:
        with self._lock:
            return [
                self._slots[(name, entry.active)]
                for name, entry in self._registry.items()
                if entry.active is not None
            ]

    def fetch(self, table: Table, key: Key, slot: TrackingState) -> EncodedRow | None:
        with self._lock:
            row = self._tables.get(self.physical_name(table, slot), {}).get(key)
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
                state = self._slots.get((page.slot.name, page.slot.slot))
                if state is None or state.state != page.slot.state:
                    raise TrackingConflictError(page.slot.name, page.expected_position, -1)
                if state.position != page.expected_position:
                    raise TrackingConflictError(state.name, page.expected_position, state.position)
            for page in pages:
                tables = {table.name: table for table in page.projection.tables}
                for table_name, changes in page.changes.items():
                    physical = self.physical_name(tables[table_name], page.slot)
                    rows = self._tables.setdefault(physical, {})
                    for key, row in changes.items():
                        if row is None:
                            rows.pop(key, None)
                        else:
                            rows[key] = dict(row)
                state = self._slots[(page.slot.name, page.slot.slot)]
                self._slots[(state.name, state.slot)] = dataclasses.replace(
                    state, position=page.new_position, last_error=None
                )

    def record_error(self, slot: TrackingState, error: str | None) -> None:
        with self._lock:
            state = self._slots.get((slot.name, slot.slot))
            if state is not None:
                self._slots[(slot.name, slot.slot)] = dataclasses.replace(state, last_error=error)

    def reader(self, slots: Mapping[str, TrackingState] | None = None) -> ViewReaderBase:
        return _MemoryReader(self, slots or {})

    def consistent(self) -> AbstractContextManager[None]:
        return self._lock  # type: ignore[return-value]

    def stream_rows(self, table: Table, slot: TrackingState) -> Iterator[tuple[Any, ...]]:
        with self._lock:
            rows = list(self._tables.get(self.physical_name(table, slot), {}).values())
        for row in rows:
            yield tuple(row[name] for name in table.column_names)

    def raw_rows(self, name: str, slot: TrackingState) -> list[EncodedRow] | None:
        with self._lock:
            physical = self.physical_name(name, slot)
            rows = self._tables.get(physical)
            return None if rows is None else [dict(row) for row in rows.values()]


class _MemoryReader(ViewReaderBase):
    def __init__(self, store: MemoryViewStore, slots: Mapping[str, TrackingState]) -> None:
        self._store = store
        self._slots = slots
        self.plain = store.plain

    def _slot(self, table: Table) -> TrackingState:
        owner = self._store._owners.get(table.name)
        chosen = self._slots.get(owner) if owner is not None else None
        return chosen if chosen is not None else self._store.active_slot(table)

    def _rows(self, table: Table) -> list[EncodedRow]:
        physical = self._store.physical_name(table, self._slot(table))
        with self._store._lock:
            return [dict(row) for row in self._store._tables.get(physical, {}).values()]

    def _get(self, table: Table, key: Key) -> EncodedRow | None:
        return self._store.fetch(table, key, self._slot(table))

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
