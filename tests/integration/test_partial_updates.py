"""A read-model page written by a process that did not build the rows it changes (a reopened
store: its cache of the slot is partial) writes only the columns it changed, on SQLite, where
each column an ``UPDATE`` sets moves its indexes; the rows stay what a rebuild gives.

The viewer-delta ring of a run past 256 revisions rewrites a slot whose previous revision the
cache holds: the case where only the changed columns of a known row are written."""

from __future__ import annotations

from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.compact_text import compact
from runledger.infrastructure.views.projector import REWRITTEN, _as_stored
from runledger.infrastructure.views.sql import _same
from runledger.infrastructure.views.store import encode_row
from runledger.projections.base import Table
from runledger.projections.viewer_deltas import VIEWER_DELTA_RETENTION
from tests.support.sessions import session_binding, session_events


def _appended(store: WorkflowStore, batches: range) -> None:
    for batch in batches:
        store.append_session_events("run-1", session_events(batch * 4 + 1, 4))


def test_a_reopened_store_rewrites_the_revision_ring_as_a_rebuild_does(
    durable_url: str,
) -> None:
    with open_runtime(durable_url) as runtime:
        store = WorkflowStore(runtime)
        store.create_run("run-1", workflow_name="review", input={})
        store.record_session_binding("run-1", session_binding("run-1", "session-1"))
        _appended(store, range(VIEWER_DELTA_RETENTION))
    with open_runtime(durable_url) as runtime:
        store = WorkflowStore(runtime)
        runner = runtime.projector.runner("viewer_deltas")
        assert not runner.authoritative
        _appended(store, range(VIEWER_DELTA_RETENTION, VIEWER_DELTA_RETENTION + 8))
        live = store.viewer_deltas("run-1", after_revision=VIEWER_DELTA_RETENTION)

        assert all(outcome.equal for outcome in runtime.verify_projections())
        runtime.rebuild_projections()
        assert store.viewer_deltas("run-1", after_revision=VIEWER_DELTA_RETENTION) == live


ROWS = Table(
    "rows",
    columns=(
        ("run_id", "text"),
        ("revision", "int"),
        ("graph", "json"),
        ("deltas", "json"),
        ("undo", "json"),
        ("created_at", "compact"),
        ("updated_at", "compact"),
    ),
    key=("run_id",),
    owner="run_id",
)


def test_a_committed_row_as_stored_keeps_the_json_the_page_kept_and_marks_the_rest() -> None:
    kept, replaced = {"nodes": [1]}, {"records": [1, 2]}
    first, later = "2026-01-01T00:00:00+00:00", "2026-01-02T00:00:00+00:00"
    old = {"run_id": "r", "revision": 1, "graph": kept, "deltas": replaced, "undo": {}}
    old |= {"created_at": first, "updated_at": first}
    new = {**old, "revision": 2, "deltas": {"records": [1, 2]}, "undo": {}, "updated_at": later}
    new_stored = encode_row(ROWS, new)

    stored = _as_stored(old, new, new_stored, ROWS)

    # The very object: its text is the new row's, so the column is left alone.
    assert stored["graph"] == new_stored["graph"]
    # Equal but rebuilt values are written again, never taken for unchanged.
    assert stored["deltas"] is REWRITTEN
    assert stored["undo"] is REWRITTEN
    assert not _same(new_stored["deltas"], stored["deltas"])
    assert (stored["run_id"], stored["revision"]) == ("r", 1)
    # A compact value is text in the row and bytes as stored: an equal one is the new row's
    # bytes (left alone), another is written.
    assert stored["created_at"] == compact(first)
    assert _same(new_stored["created_at"], stored["created_at"])
    assert stored["updated_at"] is REWRITTEN
    # The committed row itself is left as it was.
    assert stored is not old
    assert old["graph"] is kept
