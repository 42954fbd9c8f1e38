"""Which index each query of a SQLite store uses (``EXPLAIN QUERY PLAN`` of the statements it
really runs): every index is some query's, and no query scans a whole table."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from runledger.domain.values import Actor
from runledger.infrastructure.store import WorkflowStore, open_store
from runledger.projections import runs
from runledger.projections.viewer_deltas import RUNS as VIEWER_RUNS
from tests.support.scenario import RUN, SESSION, present_terminal, queue, running_run

AUDIT_SCANS = {("verify_run", "rl_so_messages"), ("verify_run", "rl_set_changes")}
"""An audit of one run reads these tables whole (they have no index on their run column):
such an index would cost a page of every message or settings change, for a rare read."""
POLICY = {"rules": [{"path": "/notes", "permissions": {"human": ["add"]}}]}
CHILD = "run-child"


def _connections(store: WorkflowStore) -> list[sqlite3.Connection]:
    """The view store's connection of this thread and the idle pooled ones of the log."""
    runtime = store._runtime
    pooled = runtime.storage.datastore.pool._pool  # type: ignore[attr-defined]
    return [
        runtime.views._connection(),  # type: ignore[attr-defined]
        *(connection._sqlite_conn for connection in pooled),
    ]


@contextmanager
def _traced(store: WorkflowStore) -> Iterator[list[str]]:
    statements: list[str] = []
    connections = _connections(store)
    for connection in connections:
        connection.set_trace_callback(statements.append)
    try:
        yield statements
    finally:
        for connection in connections:
            connection.set_trace_callback(None)


def _history(store: WorkflowStore) -> str:
    """A run with follow-ups, settings, a continuation child and a delivered terminal
    message, so that every read below has rows to find; the scope id."""
    running_run(store)
    queue(store, "follow-1")
    queue(store, "follow-2")
    scope = store.ensure_settings_scope(RUN, settings={"notes": []}, policy=POLICY)
    store.change_settings(
        RUN,
        scope.scope_id,
        request_id="note-1",
        actor=Actor("human", "h"),
        source="test",
        patch=[{"op": "add", "path": "/notes/-", "value": 1}],
    )
    store.finish_run(RUN, status="completed", final_output={"ok": True})
    present_terminal(store)
    return scope.scope_id


def _queries(store: WorkflowStore, scope_id: str) -> list[tuple[str, Callable[[], Any]]]:
    """Every read a host, the console or a command makes of the views and the log."""
    reader = store._runtime.views.reader()
    revision = reader.get(VIEWER_RUNS, (RUN,))
    assert revision is not None
    current = revision["revision"]
    return [
        ("follow_up_queue", lambda: store.follow_up_queue(RUN)),
        ("follow_up_queue_range", lambda: store.follow_up_queue_range(RUN, start=1, limit=256)),
        ("list_runs", lambda: store.list_runs()),
        ("list_runs after", lambda: store.list_runs(after=RUN)),
        ("list_runs status", lambda: store.list_runs(status="completed")),
        ("list_runs session", lambda: store.list_runs(session_id=SESSION)),
        ("list_runs root", lambda: store.list_runs(root_run_id=RUN)),
        ("newest_runs", lambda: runs.newest_runs(reader, filters={"workflow_name": "w"})),
        ("count_runs", lambda: runs.count_runs(reader, filters={})),
        ("runs_by_id", lambda: runs.runs_by_id(reader, [RUN, CHILD])),
        ("session_outbox", lambda: store.session_outbox(SESSION)),
        ("next_deliverable", lambda: store.next_deliverable(SESSION)),
        ("viewer_deltas 1", lambda: store.viewer_deltas(RUN, after_revision=current - 1)),
        ("viewer_deltas all", lambda: store.viewer_deltas(RUN, after_revision=1)),
        ("settings_scopes", lambda: store.settings_scopes(RUN)),
        ("settings_scope_at_change", lambda: store.settings_scope_at_change(scope_id, 1)),
        ("terminal_data", lambda: store.terminal_data(RUN)),
        ("event_log of a run", lambda: store.event_log(run_id=RUN)),
        ("get_run", lambda: store.get_run(RUN)),
        ("verify_run", lambda: store.verify_run(RUN)),
        # Commands read the log's lookup index: a message looks for its source, ending a
        # run for the run's follow-ups.
        (
            "create_run child",
            lambda: store.create_run(CHILD, workflow_name="w", input={}, parent_run_id=RUN),
        ),
        ("bind_origin_session child", lambda: store.bind_origin_session(CHILD, SESSION)),
        ("queue_follow_up child", lambda: queue(store, "follow-3", run_id=CHILD)),
        ("finish_run child", lambda: store.finish_run(CHILD, status="cancelled")),
    ]


def _plan(path: Path, statement: str) -> list[str]:
    with sqlite3.connect(path) as connection:
        return [row[3] for row in connection.execute("EXPLAIN QUERY PLAN " + statement)]


def _plans(tmp_path: Path) -> tuple[dict[str, list[tuple[str, list[str]]]], set[str], Path]:
    path = tmp_path / "store.db"
    plans: dict[str, list[tuple[str, list[str]]]] = {}
    with open_store(f"sqlite:///{path}") as store:
        scope_id = _history(store)
        for name, query in _queries(store, scope_id):
            with _traced(store) as statements:
                query()
            plans[name] = [
                (statement, _plan(path, statement))
                for statement in statements
                if re.match(r"\s*(SELECT|UPDATE|DELETE)\b", statement, re.IGNORECASE)
            ]
    with sqlite3.connect(path) as connection:
        indexes = {
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
            )
        }
    return plans, indexes, path


def test_every_index_of_a_sqlite_store_is_used_by_a_query_and_no_query_scans_a_table(
    tmp_path: Path,
) -> None:
    plans, indexes, _ = _plans(tmp_path)

    used = {
        match.group(1)
        for steps in plans.values()
        for _, plan in steps
        for line in plan
        for match in [re.search(r"USING (?:COVERING )?INDEX (\S+)", line)]
        if match is not None
    }
    scans = [
        (name, line)
        for name, steps in plans.items()
        for _, plan in steps
        for line in plan
        if re.fullmatch(r"SCAN \S+", line)
        and (name, re.sub(r"_v\d+_\d+$", "", line.removeprefix("SCAN "))) not in AUDIT_SCANS
    ]
    report = "\n".join(
        f"{name}: {statement}\n    " + "\n    ".join(plan)
        for name, steps in plans.items()
        for statement, plan in steps
    )
    assert sorted(indexes - used) == [], report
    assert scans == [], report


def test_the_reads_that_had_an_index_of_their_own_use_the_key_or_another_index(
    tmp_path: Path,
) -> None:
    # (run_id, revision) on rl_vd_revisions and (target_session_id, session_order) on
    # rl_so_messages each cost a page of nearly every command; their reads do without them.
    plans, indexes, _ = _plans(tmp_path)

    def lines(name: str, table: str) -> list[str]:
        return [
            line
            for statement, plan in plans[name]
            if f'FROM "{table}' in statement
            for line in plan
        ]

    for name in ("viewer_deltas 1", "viewer_deltas all"):
        assert lines(name, "rl_vd_revisions") == [
            "SEARCH rl_vd_revisions_v6_1 USING INDEX sqlite_autoindex_rl_vd_revisions_v6_1_1 "
            "(run_id=? AND slot=?)"
        ]
    # The outbox is read whole: its sort is of the rows it returns anyway.
    assert lines("session_outbox", "rl_so_messages") == [
        "SEARCH rl_so_messages_v3_1 USING INDEX "
        "rl_so_messages_v3_1_target_session_id_status_session_order_idx (target_session_id=?)",
        "USE TEMP B-TREE FOR ORDER BY",
    ]
    assert {
        "rl_vd_revisions_v6_1_run_id_revision_idx",
        "rl_so_messages_v3_1_target_session_id_session_order_idx",
    } & indexes == set()
