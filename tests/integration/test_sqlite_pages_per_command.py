"""How many pages of the SQLite file one command writes (a deterministic stand-in for speed)."""

from __future__ import annotations

import collections
import functools
import sqlite3
import struct
from collections.abc import Callable
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


QUEUE_FOLLOW_UP_PAGES = 23.0
"""Pages of the WAL one ``queue_follow_up`` writes on average in the history below: 22.1
measured (25.0 before two view indexes were dropped and four small tables clustered), with
a little slack:
every page is a b-tree written, so a new index or table on the path shows here first."""


def _pages_of_each(path: Path, commands: list[Callable[[], object]]) -> list[list[str]]:
    """The b-tree of each WAL page each command wrote, one command per checkpointed WAL."""
    written = []
    for command in commands:
        checker = sqlite3.connect(path)
        checker.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
        command()
        owners = dict(checker.execute("SELECT pageno, name FROM dbstat"))
        written.append([owners.get(page, "") for page in _wal_pages(Path(f"{path}-wal"))])
        checker.close()
    return written


def test_a_queued_follow_up_writes_no_more_pages_than_measured(tmp_path: Path) -> None:
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}") as store:
        for run in range(20):
            run_id = f"run-{run}"
            store.create_run(run_id, workflow_name="pages", input={"n": run})
            store.bind_origin_session(run_id, f"session-{run}")
        commands: list[Callable[[], object]] = [
            functools.partial(
                store.queue_follow_up,
                f"run-{number % 20}",
                request_id=f"request-{number}",
                target_session_id=f"session-{number % 20}",
                actor=Actor("session", f"session-{number % 20}"),
                source="pi-session",
                prompt=f"Follow-up {number}: check the edge cases.",
            )
            for number in range(100)
        ]
        written = _pages_of_each(path, commands)

    mean = sum(map(len, written)) / len(written)
    print(f"{mean:.2f} pages per queue_follow_up")
    by_tree = collections.Counter(name for pages in written for name in pages)
    assert mean <= QUEUE_FOLLOW_UP_PAGES, by_tree
