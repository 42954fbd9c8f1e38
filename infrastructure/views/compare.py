"""Comparing two copies of a read model: digests, the first differing rows, a diff summary.

Rows are compared decoded (``dump``) when both copies hold the same version, so the digest
(``digest.digest_rows``) and the first differing rows speak of values, not stored text. Two
copies of different versions may not share columns, so they are compared as stored
(``raw_summary``), keyed by the new version's primary key, counting rows added, removed and
changed per table.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from runledger.domain.canonical import canonical_json
from runledger.infrastructure.views.digest import digest_rows
from runledger.infrastructure.views.store import EncodedRow
from runledger.projections.base import Projection, Row, Table, ViewReader

Dump = dict[str, dict[str, Row]]
"""Table name -> canonical JSON of the primary key -> the decoded row."""


@dataclass(frozen=True)
class RowDifference:
    """One row that differs: its table and key, and the row in each copy (None: absent)."""

    table: str
    key: list[Any]
    live: Row | None
    rebuilt: Row | None


@dataclass(frozen=True)
class TableDiff:
    """How many rows of a table the rebuilt copy adds, removes and changes."""

    table: str
    added: int
    removed: int
    changed: int


def dump(projection: Projection, reader: ViewReader) -> Dump:
    """Every row of the projection's tables as ``reader`` sees them."""
    return {
        table.name: {canonical_json(list(table.key_of(row))): row for row in reader.scan(table)}
        for table in projection.tables
    }


def dump_digest(projection: Projection, rows: Dump) -> str:
    """The digest (``digest.digest_rows``) of a dump of the projection at its version."""
    return digest_rows(
        projection.name,
        projection.version,
        ((table, rows.get(table.name, {}).values()) for table in projection.tables),
    )


def differences(live: Dump, rebuilt: Dump, *, limit: int = 5) -> list[RowDifference]:
    """The first ``limit`` differing rows, by table name, then key."""
    found: list[RowDifference] = []
    for table in sorted(set(live) | set(rebuilt)):
        before, after = live.get(table, {}), rebuilt.get(table, {})
        for key in sorted(set(before) | set(after)):
            if before.get(key) != after.get(key):
                found.append(RowDifference(table, _key(key), before.get(key), after.get(key)))
                if len(found) >= limit:
                    return found
    return found


def _key(text: str) -> list[Any]:
    value: list[Any] = orjson.loads(text)
    return value


RowHashes = dict[int, int]
"""A 64-bit hash of a row's primary key -> a 64-bit hash of the row as stored."""


def _hash(values: Any) -> int:
    return int.from_bytes(hashlib.blake2b(orjson.dumps(values), digest_size=8).digest(), "big")


def _key_positions(table: Table) -> list[int]:
    return [table.column_names.index(name) for name in table.key]


def row_hashes(table: Table, rows: Iterable[tuple[Any, ...]]) -> RowHashes:
    """A hash per row, by a hash of its key: what two copies of one version on one backend
    compare by, without holding their rows (a row may be kilobytes of JSON)."""
    positions = _key_positions(table)
    return {_hash([row[index] for index in positions]): _hash(row) for row in rows}


@dataclass
class HashComparison:
    """One table's rows compared with the hashes of the live copy."""

    diff: TableDiff
    differing: list[list[Any]]
    """Keys of rows the rebuilt copy adds or changes (at most ``limit``)."""
    removed: set[int]
    """Key hashes of live rows the rebuilt copy lacks."""


def compare_hashes(
    table: Table, live: RowHashes, rebuilt: Iterable[tuple[Any, ...]], *, limit: int
) -> HashComparison:
    """Stream the rebuilt copy's rows past the live hashes (which it consumes)."""
    positions = _key_positions(table)
    added = changed = 0
    differing: list[list[Any]] = []
    for row in rebuilt:
        key = [row[index] for index in positions]
        found = live.pop(_hash(key), None)
        if found == _hash(row):
            continue
        if found is None:
            added += 1
        else:
            changed += 1
        if len(differing) < limit:
            differing.append(key)
    return HashComparison(TableDiff(table.name, added, len(live), changed), differing, set(live))


def keys_of(
    table: Table, rows: Iterable[tuple[Any, ...]], hashes: set[int], limit: int
) -> list[list[Any]]:
    """The keys of up to ``limit`` rows whose key hash is in ``hashes``."""
    positions = _key_positions(table)
    found: list[list[Any]] = []
    # Read to the end: a statement left half-read would hold the snapshot's transaction.
    for row in rows:
        key = [row[index] for index in positions]
        if len(found) < limit and _hash(key) in hashes:
            found.append(key)
    return found


def summary(live: Dump, rebuilt: Dump) -> list[TableDiff]:
    """Added, removed and changed rows per table, between two dumps of one version."""
    return [
        _count(table, live.get(table, {}), rebuilt.get(table, {}))
        for table in sorted(set(live) | set(rebuilt))
    ]


def raw_summary(
    live: Mapping[str, Sequence[EncodedRow]],
    rebuilt: Mapping[str, Sequence[EncodedRow]],
    keys: Mapping[str, Sequence[str]],
) -> list[TableDiff]:
    """Added, removed and changed rows per table between copies of two versions, as stored.

    ``keys`` gives each table's primary key in the rebuilt version; a table of the live
    version only counts as removed in full.
    """
    diffs = []
    for table in sorted(set(live) | set(rebuilt)):
        columns = keys.get(table)
        if columns is None:
            diffs.append(TableDiff(table, 0, len(live.get(table, ())), 0))
            continue
        diffs.append(
            _count(
                table, _keyed(live.get(table, ()), columns), _keyed(rebuilt.get(table, ()), columns)
            )
        )
    return diffs


def _keyed(rows: Sequence[EncodedRow], columns: Sequence[str]) -> dict[str, EncodedRow]:
    return {canonical_json([row.get(column) for column in columns]): row for row in rows}


def _count(table: str, before: Mapping[Any, Any], after: Mapping[Any, Any]) -> TableDiff:
    added = sum(1 for key in after if key not in before)
    removed = sum(1 for key in before if key not in after)
    changed = sum(1 for key in after if key in before and before[key] != after[key])
    return TableDiff(table, added, removed, changed)
