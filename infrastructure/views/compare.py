"""Comparing two copies of a read model: digests, the first differing rows, a diff summary.

Rows are compared decoded (``dump``) when both copies hold the same version, so the digest
(``digest.digest_rows``) and the first differing rows speak of values, not stored text. Two
copies of different versions may not share columns, so they are compared as stored
(``raw_summary``), keyed by the new version's primary key, counting rows added, removed and
changed per table.
"""

from __future__ import annotations

import hashlib
import sqlite3
from collections.abc import Container, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

import orjson

from runledger.domain.canonical import canonical_json
from runledger.infrastructure.views.digest import digest_rows
from runledger.infrastructure.views.store import EncodedRow, comparable, comparable_values
from runledger.projections.base import Projection, Row, Table, ViewReader, rows_version

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
        rows_version(projection),
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


def _key(text: str | bytes) -> list[Any]:
    value: list[Any] = orjson.loads(text)
    return value


SPILL_CACHE_KIB: Final = 1024
"""Page cache of the scratch database that holds one table's row hashes: a build's memory
stays this, however many rows the live copy has (the hashes go to a temporary file)."""


def _hash(encoded: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(encoded, digest_size=8).digest(), "big", signed=True)


def _key_positions(table: Table) -> list[int]:
    return [table.column_names.index(name) for name in table.key]


class RowHashes:
    """A 64-bit hash of each row of one table as stored, by a 64-bit hash of its primary key.

    They live in a private temporary SQLite database (deleted when closed), not in a dict: a
    copy of a read model has a row per run, session or follow-up, so a dict of them grows with
    history; this one costs ``SPILL_CACHE_KIB`` of memory at most.
    """

    def __init__(self, table: Table) -> None:
        self._table = table
        self._positions = _key_positions(table)
        self._decoded = bool(table.packed_columns or table.compact_columns)
        self._db = sqlite3.connect("", isolation_level=None)
        for pragma in (
            f"cache_size=-{SPILL_CACHE_KIB}",
            "journal_mode=OFF",
            "synchronous=OFF",
            "temp_store=FILE",
        ):
            self._db.execute(f"PRAGMA {pragma}")
        self._db.execute("CREATE TABLE live (k INTEGER PRIMARY KEY, r INTEGER NOT NULL)")
        self._db.execute(
            "CREATE TABLE rebuilt "
            "(k INTEGER PRIMARY KEY, r INTEGER NOT NULL, seq INTEGER NOT NULL, key BLOB NOT NULL)"
        )

    def _hashed(self, rows: Iterable[tuple[Any, ...]]) -> Iterator[tuple[int, int, bytes]]:
        positions, table, decoded = self._positions, self._table, self._decoded
        for row in rows:
            stored = comparable_values(table, row) if decoded else row
            key = orjson.dumps([stored[index] for index in positions])
            yield _hash(key), _hash(orjson.dumps(stored)), key

    def add(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Hash the live copy's rows."""
        with self._db:
            self._db.execute("BEGIN")
            self._db.executemany(
                "INSERT OR REPLACE INTO live (k, r) VALUES (?, ?)",
                ((key, row) for key, row, _ in self._hashed(rows)),
            )

    def compare(
        self, name: str, rebuilt: Iterable[tuple[Any, ...]], limit: int
    ) -> tuple[TableDiff, list[list[Any]]]:
        """The rebuilt copy against the live hashes, and the keys of the first ``limit`` rows
        it adds or changes, in its order; the live hashes left are those of removed rows."""
        db = self._db
        with db:
            db.execute("BEGIN")
            db.executemany(
                "INSERT OR REPLACE INTO rebuilt (k, r, seq, key) VALUES (?, ?, ?, ?)",
                (
                    (key, row, seq, encoded)
                    for seq, (key, row, encoded) in enumerate(self._hashed(rebuilt))
                ),
            )
            ((added, changed),) = db.execute(
                "SELECT COALESCE(SUM(l.r IS NULL), 0), COALESCE(SUM(l.r != b.r), 0) "
                "FROM rebuilt b LEFT JOIN live l ON l.k = b.k"
            ).fetchall()
            differing = [
                _key(encoded)
                for (encoded,) in db.execute(
                    "SELECT b.key FROM rebuilt b LEFT JOIN live l ON l.k = b.k "
                    "WHERE l.r IS NULL OR l.r != b.r ORDER BY b.seq LIMIT ?",
                    (limit,),
                )
            ]
            db.execute("DELETE FROM live WHERE k IN (SELECT k FROM rebuilt)")
            db.execute("DELETE FROM rebuilt")
        return TableDiff(name, int(added), len(self), int(changed)), differing

    def __len__(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM live").fetchone()[0])

    def __contains__(self, key_hash: object) -> bool:
        found = self._db.execute("SELECT 1 FROM live WHERE k = ?", (key_hash,)).fetchone()
        return found is not None

    def close(self) -> None:
        """Delete the hashes (their temporary file)."""
        self._db.close()


def row_hashes(table: Table, rows: Iterable[tuple[Any, ...]]) -> RowHashes:
    """A hash per row, by a hash of its key: what two copies of one version on one backend
    compare by, without holding their rows (a row may be kilobytes of JSON)."""
    hashes = RowHashes(table)
    hashes.add(rows)
    return hashes


@dataclass
class HashComparison:
    """One table's rows compared with the hashes of the live copy."""

    diff: TableDiff
    differing: list[list[Any]]
    """Keys of rows the rebuilt copy adds or changes (at most ``limit``, in its order)."""
    removed: RowHashes
    """Key hashes of live rows the rebuilt copy lacks."""


def compare_hashes(
    table: Table, live: RowHashes, rebuilt: Iterable[tuple[Any, ...]], *, limit: int
) -> HashComparison:
    """Stream the rebuilt copy's rows past the live hashes (which it consumes)."""
    diff, differing = live.compare(table.name, rebuilt, limit)
    return HashComparison(diff, differing, live)


def keys_of(
    table: Table, rows: Iterable[tuple[Any, ...]], hashes: Container[int], limit: int
) -> list[list[Any]]:
    """The keys of up to ``limit`` rows whose key hash is in ``hashes``."""
    positions = _key_positions(table)
    found: list[list[Any]] = []
    # Read to the end: a statement left half-read would hold the snapshot's transaction.
    for row in rows:
        stored = comparable_values(table, row) if table.compact_key else row
        key = [stored[index] for index in positions]
        if len(found) < limit and _hash(orjson.dumps(key)) in hashes:
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
    tables: Mapping[str, Table],
) -> list[TableDiff]:
    """Added, removed and changed rows per table between copies of two versions, as stored.

    ``tables`` gives each table in the rebuilt version: its primary key, and which bytes are
    compact text (the kinds of the version before are not known; a column it kept otherwise
    is compared by the rebuilt version's kind). A table of the live version only counts as
    removed in full.
    """
    diffs = []
    for name in sorted(set(live) | set(rebuilt)):
        table = tables.get(name)
        if table is None:
            diffs.append(TableDiff(name, 0, len(live.get(name, ())), 0))
            continue
        diffs.append(
            _count(name, _keyed(live.get(name, ()), table), _keyed(rebuilt.get(name, ()), table))
        )
    return diffs


def _keyed(rows: Sequence[EncodedRow], table: Table) -> dict[str, EncodedRow]:
    keyed = {}
    for row in rows:
        values = {
            name: comparable(value, name in table.compact_columns) for name, value in row.items()
        }
        keyed[canonical_json([values.get(column) for column in table.key])] = values
    return keyed


def _count(table: str, before: Mapping[Any, Any], after: Mapping[Any, Any]) -> TableDiff:
    added = sum(1 for key in after if key not in before)
    removed = sum(1 for key in before if key not in after)
    changed = sum(1 for key in after if key in before and before[key] != after[key])
    return TableDiff(table, added, removed, changed)
