"""What the event log's storage and the view stores share about the databases they both write.

The views live in the event log's database (the same SQLite file, the same PostgreSQL schema),
so they make the file the same way and read the same errors; neither imports the other's
backend for it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, Final

import psycopg

PRIVATE_FILE_MODE: Final = 0o600
"""A new database holds prompts and outputs: only its owner may read it."""

MOVED_SQLSTATE: Final = "RLPM1"
"""The SQLSTATE of a view store's tracking compare-and-set that found a projection moved."""


PIPELINE_MAX_BYTES: Final = 4 * 1024 * 1024
"""The most payload a transaction sends as one pipeline. psycopg's pipeline sync (3.3, C and
Python) stops writing once its queue is empty even when libpq still holds unsent bytes, so a
statement of about 16 MiB or more never reaches the server and both sides wait for ever.
Above this size the statements go one at a time: a few round trips, beside megabytes."""


@contextmanager
def pipelined(
    conn: psycopg.Connection[Any], payload_bytes: int
) -> Iterator[psycopg.Pipeline | None]:
    """A pipeline for a transaction of ``payload_bytes``, or None (statements sent one by
    one) for one too large to pipeline safely (see ``PIPELINE_MAX_BYTES``)."""
    if payload_bytes > PIPELINE_MAX_BYTES:
        yield None
        return
    with conn.pipeline() as pipeline:
        yield pipeline


def create_private_file(path: str) -> None:
    """Create the database file owner-only if it does not exist yet, whatever the umask.

    SQLite gives the ``-wal`` and ``-shm`` files it makes the mode of the database file, so
    they follow. An existing file keeps the mode its owner gave it.
    """
    if path in ("", ":memory:") or path.startswith("file:"):
        return
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, PRIVATE_FILE_MODE)
    except FileExistsError:
        return
    try:
        os.fchmod(descriptor, PRIVATE_FILE_MODE)
    finally:
        os.close(descriptor)


def psycopg_cause(error: BaseException) -> psycopg.Error | None:
    """The psycopg error under the library's translation of it, if there is one."""
    cause: BaseException | None = error
    while cause is not None and not isinstance(cause, psycopg.Error):
        cause = cause.__cause__ or cause.__context__
    return cause


class CommitRows:
    """A read-model step's writes gathered for the commit function (PostgreSQL's one call
    per command) instead of sent as statements: the tracking moves as column arrays, and
    each view write as a set statement over a slice of one flat array of text values.

    A set statement reads its rows as ``$1[$2 + i * width + column]`` (1-based columns) for
    ``i`` below ``$3``: the values array, the slice's offset, its row count.
    """

    def __init__(self) -> None:
        self.moves: tuple[list[Any], ...] = ([], [], [], [], [])
        self.statements: list[str] = []
        self.offsets: list[int] = []
        self.counts: list[int] = []
        self.values: list[str | None] = []

    def add(self, statement: str, rows: list[tuple[Any, ...]]) -> None:
        """One set statement over ``rows`` (each of the statement's width)."""
        self.statements.append(statement)
        self.offsets.append(len(self.values))
        self.counts.append(len(rows))
        values = self.values
        for row in rows:
            values.extend(map(as_text, row))


def as_text(value: Any) -> str | None:
    """A column value as PostgreSQL reads it back exactly from text: ``repr`` of a float is
    the shortest string that reads back to the same double."""
    kind = type(value)
    if kind is str or value is None:
        return value  # type: ignore[no-any-return]
    if kind is bool:
        return "t" if value else "f"
    if kind is float:
        return repr(value)
    if kind is bytes:
        return "\\x" + bytes(value).hex()  # bytea's hex input form
    return str(value)
