"""A blue/green rebuild on SQLite and PostgreSQL compares the two copies in the database
(``compare_slots``): it must find what the compare by row hashes finds, row for row.

Each test spoils the live copy of terminal data (a row changed, one deleted so the rebuild
adds it, one that no event made so the rebuild lacks it) and rebuilds twice: once as the
store compares, once with the store's compare taken away, so the hashes' path answers.
"""

from __future__ import annotations

from typing import Any

import pytest

from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.views.rebuild import BuildOutcome
from tests.integration.test_blue_green import NAME, history
from tests.integration.test_read_model_rebuild import execute_sql

__all__ = ["history"]

TABLE = "rl_td_runs"


def _physical(url: str) -> str:
    with open_runtime(url, embedded_projections=False) as runtime:
        active = runtime.views.registry(NAME).active
        assert active is not None
        return runtime.views.physical_name(TABLE, active)


def _rebuild(url: str, *, in_store: bool) -> BuildOutcome:
    with open_runtime(url, embedded_projections=False) as runtime:
        if not in_store:
            _without_store_compare(runtime)
        [outcome] = runtime.builds.rebuild([NAME])
    return outcome


def _without_store_compare(runtime: StoreRuntime) -> None:
    # The rebuild looks the method up on the store: an attribute of None hides it.
    runtime.views.compare_slots = None  # type: ignore[attr-defined]


def _seen(outcome: BuildOutcome) -> tuple[Any, ...]:
    return (
        outcome.compared,
        outcome.equal,
        [(t.table, t.added, t.removed, t.changed) for t in outcome.tables],
        sorted((d.table, d.key, d.live == d.rebuilt) for d in outcome.first_differences),
    )


def test_an_unspoiled_copy_is_equal_and_switches(history: str) -> None:
    outcome = _rebuild(history, in_store=True)

    assert (outcome.compared, outcome.equal, outcome.switched) == ("rows", True, True)
    assert all((t.added, t.removed, t.changed) == (0, 0, 0) for t in outcome.tables)


def test_changed_added_and_removed_rows_are_found_as_the_hashes_find_them(history: str) -> None:
    physical = _physical(history)
    execute_sql(history, f"UPDATE {physical} SET error = 'spoiled' WHERE run_id = 'bg-run-1'")
    execute_sql(history, f"DELETE FROM {physical} WHERE run_id = 'bg-run-2'")
    execute_sql(
        history,
        f"INSERT INTO {physical} (run_id, status, input, restart_number) "
        "VALUES ('no-such-run', 'running', '{}', 0)",
    )

    in_store = _rebuild(history, in_store=True)
    by_hashes = _rebuild(history, in_store=False)

    assert _seen(in_store) == _seen(by_hashes)
    assert (in_store.compared, in_store.equal, in_store.switched) == ("rows", False, False)
    assert [(t.added, t.removed, t.changed) for t in in_store.tables] == [(1, 1, 1)]
    assert sorted(d.key for d in in_store.first_differences) == [
        ["bg-run-1"],
        ["bg-run-2"],
        ["no-such-run"],
    ]


def test_a_null_where_a_value_was_is_a_change(history: str) -> None:
    physical = _physical(history)
    execute_sql(history, f"UPDATE {physical} SET input = NULL WHERE run_id = 'bg-run-3'")
    execute_sql(history, f"UPDATE {physical} SET input = NULL WHERE run_id = 'bg-run-4'")

    in_store = _rebuild(history, in_store=True)
    by_hashes = _rebuild(history, in_store=False)

    assert _seen(in_store) == _seen(by_hashes)
    assert [t.changed for t in in_store.tables] == [2]


def test_the_same_number_stored_as_text_is_a_change_on_sqlite(
    history: str,
) -> None:
    if not history.startswith("sqlite"):
        pytest.skip("PostgreSQL's column types hold one type: only SQLite can store this")
    physical = _physical(history)
    # Integer affinity keeps a text that does not read as a number as text.
    execute_sql(history, f"UPDATE {physical} SET restart_number = '0x' WHERE run_id = 'bg-run-5'")
    execute_sql(history, f"UPDATE {physical} SET restart_number = 0.5 WHERE run_id = 'bg-run-6'")

    in_store = _rebuild(history, in_store=True)
    by_hashes = _rebuild(history, in_store=False)

    assert _seen(in_store) == _seen(by_hashes)
    assert [t.changed for t in in_store.tables] == [2]
