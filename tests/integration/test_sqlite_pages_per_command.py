"""How many pages of the SQLite file one command writes (a deterministic stand-in for speed)."""

from __future__ import annotations

import collections
import functools
import sqlite3
import struct
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Final

from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.sessions import session_binding


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


PAGES_PER_COMMAND: Final = {
    "create_run": 18.8,
    "record_progress": 9.2,
    "queue_follow_up": 22.5,
    "append_session_events": 14.5,
    "finish_run": 21.5,
}
"""WAL pages each command writes on average in the history below, as measured, with a little
slack (README, Performance: the figures before and after, by b-tree). A page is a b-tree
written, so a new index or table on a command's path shows here first."""


def _records(first: int) -> list[dict[str, object]]:
    return [
        {
            "seq": seq,
            "at": "2026-01-01T00:00:00.000Z",
            "type": "tool_execution_finished",
            "nodeId": "build",
            "attemptId": "attempt-1",
            "payload": {"toolCallId": f"call-{seq}", "output": "ok " * 20},
        }
        for seq in range(first, first + 64)
    ]


def _commands(store: WorkflowStore) -> Iterator[tuple[str, Callable[[], object]]]:
    """Twenty runs' lives: created, running, three follow-ups, a session batch, finished."""
    store.create_run("session-run", workflow_name="pages", input={})
    store.record_session_binding("session-run", session_binding("session-run", "pi-session"))
    for run in range(20):
        run_id, session = f"run-{run}", f"session-{run}"
        yield "create_run", functools.partial(store.create_run, run_id, workflow_name="w", input={})
        store.bind_origin_session(run_id, session)
        yield (
            "record_progress",
            functools.partial(store.record_progress, run_id, status="running", current_node="a"),
        )
        for number in range(3):
            yield (
                "queue_follow_up",
                functools.partial(
                    store.queue_follow_up,
                    run_id,
                    request_id=f"request-{number}",
                    target_session_id=session,
                    actor=Actor("session", session),
                    source="pi-session",
                    prompt=f"Follow-up {number}: check the edge cases.",
                ),
            )
        yield (
            "append_session_events",
            functools.partial(store.append_session_events, "session-run", _records(64 * run + 1)),
        )
        yield "finish_run", functools.partial(store.finish_run, run_id, status="completed")


def pages_by_command(path: Path) -> dict[str, collections.Counter[str]]:
    """For each command, how many WAL pages of each b-tree it wrote (``""``: a new page),
    counted from a WAL checkpointed empty before each command; ``"#"`` counts the commands."""
    counts: dict[str, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    with open_store(f"sqlite:///{path}") as store:
        for name, command in _commands(store):
            checker = sqlite3.connect(path)
            checker.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            command()
            owners = dict(checker.execute("SELECT pageno, name FROM dbstat"))
            pages = _wal_pages(Path(f"{path}-wal"))
            checker.close()
            counts[name].update(owners.get(page, "") for page in pages)
            counts[name]["#"] += 1
    return counts


def test_each_command_writes_no_more_pages_than_measured(tmp_path: Path) -> None:
    counts = pages_by_command(tmp_path / "store.db")

    means = {
        name: (sum(counter.values()) - counter["#"]) / counter["#"]
        for name, counter in counts.items()
    }
    for name, counter in counts.items():
        print(f"{name}: {means[name]:.1f} pages")
        for tree, pages in counter.most_common():
            if tree != "#":
                print(f"    {pages / counter['#']:5.2f} {tree}")
    assert {
        name: round(mean, 1) for name, mean in means.items() if mean > PAGES_PER_COMMAND[name]
    } == {}
