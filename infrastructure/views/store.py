"""Where projections keep their rows and tracking positions: the interface of a view store.

A view store commits a page of row changes for one or more projections together with their
new tracking positions in ONE transaction, and only if every projection is still at the
position the page was computed from: a page is never applied twice, even by two workers or
two embedded hosts racing on one database.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
from eventsourcing.persistence import IntegrityError

from runledger.projections.base import Key, Projection, Row, Table

EncodedRow = dict[str, Any]
"""A row as stored: JSON columns are text, so cached rows can never be mutated by accident."""

TableChanges = dict[Key, EncodedRow | None]
"""Primary key -> new encoded row, or None to delete it."""


@dataclass(frozen=True)
class TrackingState:
    """A projection's tracking row: its version, position and last error."""

    name: str
    version: int
    position: int
    last_error: str | None


@dataclass(frozen=True)
class PageCommit:
    """One projection's share of a page: expected and new position, and its row changes."""

    projection: Projection
    expected_position: int
    new_position: int
    changes: Mapping[str, TableChanges]


class TrackingConflictError(IntegrityError):
    """Another writer moved a projection since this page was read; nothing was written."""

    def __init__(self, name: str, expected: int, actual: int) -> None:
        super().__init__(f"projection {name} is at {actual}, not {expected}")
        self.name = name
        self.expected = expected
        self.actual = actual


def encode_row(table: Table, row: Row) -> EncodedRow:
    """A row as stored (JSON columns as text), refusing missing or unknown columns."""
    if set(row) != set(table.column_names):
        missing = set(table.column_names) - set(row)
        extra = set(row) - set(table.column_names)
        raise ValueError(f"{table.name} row: missing {sorted(missing)}, unknown {sorted(extra)}")
    if not table.json_columns:
        return dict(row)
    return {
        name: orjson.dumps(value).decode() if name in table.json_columns else value
        for name, value in row.items()
    }


def decode_row(table: Table, row: dict[str, Any]) -> Row:
    """Decode a row as stored, in place (callers pass a fresh dict of their own)."""
    for name in table.json_columns:
        value = row[name]
        row[name] = orjson.loads(value) if value is not None else None
    for name in table.bool_columns:
        if row[name] is not None:
            row[name] = bool(row[name])
    return row


class ViewStore(ABC):
    """Tables and tracking of every projection on one backend."""

    @abstractmethod
    def ensure(self, projection: Projection) -> TrackingState:
        """Create the projection's tables and tracking row if missing; a stored version other
        than the projection's means the view is stale, so it is reset to position 0."""

    @abstractmethod
    def reset(self, projection: Projection, *, defer_indexes: bool = False) -> None:
        """Drop and recreate the projection's tables; its tracking goes back to 0.

        With ``defer_indexes``, secondary indexes wait for ``create_indexes``: building an
        index once after a bulk load is far cheaper than maintaining it row by row.
        """

    def create_indexes(self, projection: Projection) -> None:  # noqa: B027 - optional
        """Create the secondary indexes ``reset(defer_indexes=True)`` left out."""

    @abstractmethod
    def tracking(self) -> list[TrackingState]:
        """Every projection's tracking row."""

    @abstractmethod
    def fetch(self, table: Table, key: Key) -> EncodedRow | None:
        """A committed row, encoded as stored."""

    @abstractmethod
    def commit(self, pages: Sequence[PageCommit]) -> None:
        """Apply all pages and move their positions atomically, or raise
        TrackingConflictError (and write nothing) if any projection moved meanwhile."""

    @abstractmethod
    def write_with_events(self, cursor: Any, pages: Sequence[PageCommit]) -> bool:
        """Move the pages' positions and write their rows on ``cursor``, in the transaction
        that inserts the events they project (the storage commits it; memory passes None).

        False when a projection moved meanwhile, having written nothing; on PostgreSQL the
        compare-and-set runs on the server and fails the statement instead (see
        ``SameCommit``: the storage then commits the events without the views).
        """

    @abstractmethod
    def record_error(self, name: str, error: str | None) -> None:
        """Note why a projection stopped (None clears it), keeping its position."""

    @abstractmethod
    def reader(self) -> ViewReaderBase:
        """Read access to committed rows, for queries."""

    def close(self) -> None:  # noqa: B027 - optional hook; the in-memory store holds nothing
        """Release connections."""


@dataclass(frozen=True, slots=True)
class Scan:
    """One scan of a view table, as ``ViewReader.scan`` and ``count`` ask for it."""

    table: Table
    equals: Mapping[str, Any]
    within: Mapping[str, Collection[Any]]
    """Column -> the values it may hold (``column IN values``; none matches an empty one)."""
    order_by: str | None = None
    descending: bool = False
    after: Any = None
    """With ``order_by``, only rows whose ``order_by`` value lies beyond it (keyset paging)."""
    limit: int | None = None


def _could_be_stored(table: Table, values: Mapping[str, Any]) -> bool:
    """Whether each value has its column's type, so that some stored row could hold it.

    A query's argument goes into these conditions as the host gave it: a list as a run id
    must find nothing, not reach the backend (unhashable in memory, unbindable in SQL).
    """
    kinds = dict(table.columns)
    for column, value in values.items():
        kind = kinds.get(column)
        if kind == "text" and not isinstance(value, str):
            return False
        if kind == "int" and not (type(value) is int and -(2**63) <= value < 2**63):
            return False
    return True


class ViewReaderBase(ABC):
    """What every backend's reader shares: the query arguments as a ``Scan``, and decoding."""

    @abstractmethod
    def _get(self, table: Table, key: Key) -> EncodedRow | None: ...

    @abstractmethod
    def _scan(self, scan: Scan) -> Sequence[EncodedRow]:
        """The rows the scan selects, encoded as stored, in its order."""

    @abstractmethod
    def _count(self, scan: Scan) -> int:
        """How many rows the scan's conditions select."""

    def get(self, table: Table, key: Key) -> Row | None:
        """The committed row with this primary key, decoded."""
        if not _could_be_stored(table, dict(zip(table.key, key, strict=True))):
            return None
        row = self._get(table, tuple(key))
        return None if row is None else decode_row(table, row)

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
        """Committed rows, decoded (see ``projections.base.ViewReader.scan``)."""
        if equals and not _could_be_stored(table, equals):
            return []
        rows = self._scan(
            Scan(table, equals or {}, within or {}, order_by, descending, after, limit)
        )
        return [decode_row(table, row) for row in rows]

    def count(self, table: Table, *, equals: Mapping[str, Any] | None = None) -> int:
        """How many committed rows hold the ``equals`` values."""
        if equals and not _could_be_stored(table, equals):
            return 0
        return self._count(Scan(table, equals or {}, {}))
