"""``runledger compact``: give a SQLite store's free pages back to the file system.

SQLite keeps the pages of deleted rows and dropped tables (a pruned run tree, an old
projection version dropped after a rebuild) inside the file for reuse; only ``VACUUM``
rewrites the file without them. PostgreSQL's autovacuum makes such space reusable by itself,
so there is nothing for this command to do there.
"""

from __future__ import annotations

import json
import os
import sqlite3
from dataclasses import asdict, dataclass

from rich.console import Console

from runledger.domain.errors import CompactUnsupportedError, StorageUnavailableError
from runledger.infrastructure.storage.urls import redact_url, sqlite_path

BUSY_TIMEOUT_SECONDS = 30.0
"""How long VACUUM waits for writers: it needs the file to itself while it rewrites it."""


@dataclass(frozen=True)
class Compaction:
    """What ``compact`` did: the store's size on disk before and after (None: not measured)."""

    url: str
    backend: str
    before_bytes: int | None
    after_bytes: int | None
    note: str


def compact_store(url: str, backend: str, *, timeout: float = BUSY_TIMEOUT_SECONDS) -> Compaction:
    """Compact the store at ``url`` (which exists) on its ``backend``; on SQLite, waiting up
    to ``timeout`` seconds for writers to let go of the file."""
    shown = redact_url(url)
    if backend == "sqlite":
        path = sqlite_path(url, create=False)
        before = _size(path)
        _vacuum(path, shown, timeout)
        return Compaction(shown, backend, before, _size(path), "VACUUM rewrote the file")
    if backend in ("postgresql", "postgres"):
        return Compaction(
            shown, backend, None, None, "PostgreSQL's autovacuum reclaims space; nothing to do"
        )
    raise CompactUnsupportedError(url=shown)


def _size(path: str) -> int:
    # The write-ahead log holds pages too until a checkpoint: both are the store's size.
    return sum(os.path.getsize(name) for name in (path, f"{path}-wal") if os.path.exists(name))


def _vacuum(path: str, shown: str, timeout: float) -> None:
    connection = sqlite3.connect(path, timeout=timeout, isolation_level=None)
    try:
        # Checkpointed first so VACUUM sees every page, and after so the log it wrote is
        # folded into the file and truncated (the size reported is what the disk holds).
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.execute("VACUUM")
        connection.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except sqlite3.OperationalError as error:
        # A writer that held the file past the timeout (or a full disk): the same command
        # can succeed later, so it is the retryable storage error, not an internal one.
        raise StorageUnavailableError(str(error), shown, "VACUUM") from None
    finally:
        connection.close()


def print_compaction(compaction: Compaction, out: Console, *, as_json: bool) -> None:
    """The outcome as a line (sizes in bytes), or one JSON document."""
    if as_json:
        out.print_json(json.dumps(asdict(compaction)))
        return
    if compaction.before_bytes is None or compaction.after_bytes is None:
        out.print(f"{compaction.url}: {compaction.note}", markup=False, soft_wrap=True)
        return
    freed = compaction.before_bytes - compaction.after_bytes
    out.print(
        f"{compaction.url}: {compaction.before_bytes} bytes before, "
        f"{compaction.after_bytes} after ({freed} freed); {compaction.note}",
        markup=False,
        soft_wrap=True,
    )
