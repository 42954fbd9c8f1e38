"""How many pages of the SQLite file one command writes (a deterministic stand-in for speed)."""

from __future__ import annotations

import sqlite3
import struct
from pathlib import Path

from runledger.domain.values import Actor
from runledger.infrastructure.store import open_store


def _wal_pages(wal: Path) -> list[int]:
    data = wal.read_bytes()
    if len(data) < 32:
        return []
    size = struct.unpack(">I", data[8:12])[0]
    return [
        struct.unpack(">I", data[offset : offset + 4])[0]
        for offset in range(32, len(data) - size - 23, size + 24)
    ]


def test_a_follow_up_that_keeps_the_runs_status_writes_no_page_of_the_runs_indexes(
    tmp_path: Path,
) -> None:
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        store.create_run("run-1", workflow_name="pages", input={"n": 1})
        store.bind_origin_session("run-1", "session-1")
        for number in range(3):
            checker = sqlite3.connect(path)
            checker.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            store.queue_follow_up(
                "run-1",
                request_id=f"request-{number}",
                target_session_id="session-1",
                actor=Actor("session", "session-1"),
                source="pi-session",
                prompt=f"Follow-up {number}",
            )
            owners = dict(checker.execute("SELECT pageno, name FROM dbstat"))
            written = {owners.get(page, "") for page in _wal_pages(Path(f"{path}-wal"))}
            checker.close()
            assert [n for n in written if n.startswith("rl_runs_") and n.endswith("_idx")] == []
