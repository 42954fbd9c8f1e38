"""The rows a projection runner keeps decoded, bounded in rows, least recently used first.

One LRU order per table, and an eviction takes the oldest row of the table that holds the
most: a model's small tables stay whole while its big one streams through. With one order
for all tables, a rebuild's outbox runner (2,000 rows) evicted its 50 session counters
between two messages of a session, and fetched each again from the building slot: 193
fetches in a 50k-event PostgreSQL rebuild, each waiting for the page commit under way,
0.15 s of its 1.72 s.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Final

from runledger.projections.base import Key, Row


class Missing:
    """What ``get`` answers for a row the cache does not hold (a held row may be None)."""


MISSING: Final = Missing()


class RowCache:
    """At most ``limit`` rows by table and key; ``None`` is a held answer ("no row")."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._tables: dict[str, OrderedDict[Key, Row | None]] = {}
        self._size = 0

    def get(self, table_name: str, key: Key) -> Row | Missing | None:
        """The held row, now the most recently used of its table; ``MISSING`` if none."""
        rows = self._tables.get(table_name)
        if rows is None:
            return MISSING
        row = rows.get(key, MISSING)
        if row is not MISSING:
            rows.move_to_end(key)
        return row

    def peek(self, table_name: str, key: Key) -> Row | None:
        """The held row without using it (None when not held)."""
        rows = self._tables.get(table_name)
        return None if rows is None else rows.get(key)

    def put(self, table_name: str, key: Key, row: Row | None) -> bool:
        """Hold ``row``; whether a row was evicted to make room."""
        rows = self._tables.get(table_name)
        if rows is None:
            rows = self._tables[table_name] = OrderedDict()
        if key in rows:
            rows.move_to_end(key)
        else:
            self._size += 1
        rows[key] = row
        if self._size <= self.limit:
            return False
        largest = max(self._tables.values(), key=len)
        largest.popitem(last=False)
        self._size -= 1
        return True

    def clear(self) -> None:
        self._tables.clear()
        self._size = 0

    def __len__(self) -> int:
        return self._size
