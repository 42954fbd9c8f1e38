"""Read-model digests: one SHA-256 that says whether two read models hold the same rows.

A digest covers the projection's name and the version of its rows (``rows_version``: a
version that changed only how rows are stored keeps the digest) and every row of each of its tables,
as canonical JSON (decoded, so a JSON column counts by value, not by its stored text). It
does not depend on the order a backend returns rows in: rows are sorted by the canonical
JSON of their primary key, in Python, since SQL collations differ between backends. The
same log therefore gives the same digest on memory, SQLite and PostgreSQL.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from runledger.domain.canonical import canonical_json
from runledger.projections.base import Projection, Row, Table, ViewReader, rows_version


def digest_rows(name: str, version: int, tables: Iterable[tuple[Table, Iterable[Row]]]) -> str:
    """The digest of a read model given as (table, its rows) pairs, in any order."""
    digest = hashlib.sha256()
    digest.update(canonical_json({"projection": name, "version": version}).encode())
    for table, rows in sorted(tables, key=lambda pair: pair[0].name):
        digest.update(b"\n#" + canonical_json(table.name).encode())
        lines = sorted(
            (canonical_json(list(table.key_of(row))), canonical_json(row)) for row in rows
        )
        for _, line in lines:
            digest.update(b"\n" + line.encode("utf-8", "surrogatepass"))
    return digest.hexdigest()


def view_digest(projection: Projection, reader: ViewReader) -> str:
    """The digest of the rows ``reader`` sees in the projection's tables."""
    return digest_rows(
        projection.name,
        rows_version(projection),
        ((table, reader.scan(table)) for table in projection.tables),
    )
