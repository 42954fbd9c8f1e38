"""A store the previous code wrote (tests/fixtures/store_v1.db: settings.changed at class
version 1, the settings read model at version 1) opens with this code, upcasts, projects,
verifies and audits, on SQLite and, with its events copied, on PostgreSQL.

These tests check results (queries, digests), not how the new model version gets built: today
a version bump resets the model and rebuilds it in place; a blue/green build must give the
same answers.
"""

from __future__ import annotations

import dataclasses
import shutil
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Final

import orjson
import pytest

from runledger.domain.ids import continuation_run_id_for, decision_id_for
from runledger.infrastructure import open_store, verify_bundle
from runledger.infrastructure.audit.reprojection import reproject
from runledger.infrastructure.cli.demo_story import PLAN_ATTEMPT, PLAN_NODE
from runledger.infrastructure.runtime import default_projections, open_runtime
from runledger.infrastructure.storage.sqlite import SQLiteStorage
from runledger.infrastructure.views.digest import digest_rows, view_digest
from runledger.infrastructure.views.sql import _index_ddl, _index_name
from runledger.infrastructure.views.store import ViewStore, decode_row
from runledger.projections import session_outbox, settings
from runledger.projections.base import rows_version
from tests.fixtures.make_store_v1 import PATCHES, SETTINGS_RUN, TOKEN
from tests.support.audit import read_lines
from tests.support.event_copy import copy_events

FIXTURE: Final = Path(__file__).resolve().parents[1] / "fixtures" / "store_v1.db"
REVIEW_RUN: Final = f"review-{TOKEN}"
FAILED_RUN: Final = continuation_run_id_for(decision_id_for(REVIEW_RUN, PLAN_NODE, PLAN_ATTEMPT))
SETTINGS_PATHS: Final = [
    ["/mode"],
    ["/notes/-"],
    ["/notes/0"],
    ["/limits/tokens"],
    ["/limits/budget"],
    ["/limits/budget", "/limits/ceiling"],
]
"""What each of the fixture's settings-story changes wrote (PATCHES, in order)."""


def fixture_copy(folder: Path) -> Path:
    copy = folder / "store_v1.db"
    shutil.copyfile(FIXTURE, copy)
    return copy


def digests(views: ViewStore, names: set[str] | None = None) -> dict[str, str]:
    reader = views.reader()
    return {
        projection.name: view_digest(projection, reader)
        for projection in default_projections()
        if names is None or projection.name in names
    }


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ]
)
def upgraded_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The fixture as this code finds it: the file itself, or its events in PostgreSQL."""
    copy = fixture_copy(tmp_path)
    if request.param == "sqlite":
        return f"sqlite:///{copy}"
    url: str = request.getfixturevalue("postgres_store_url")
    source = SQLiteStorage(copy)
    try:
        with open_runtime(url, embedded_projections=False) as runtime:
            copied = copy_events(source, runtime.storage)
    finally:
        source.close()
    assert copied == 78
    return url


@pytest.fixture
def store(upgraded_url: str) -> Iterator:
    with open_store(upgraded_url) as opened:
        yield opened


def test_the_fixture_holds_settings_changes_of_class_version_1() -> None:
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as connection:
        states = [
            orjson.loads(state)
            for (state,) in connection.execute(
                "SELECT state FROM runledger_events WHERE topic = 'settings.changed'"
            )
        ]
        (version,) = connection.execute(
            "SELECT version FROM runledger_projections WHERE name = 'settings'"
        ).fetchone()

    assert len(states) == 7
    assert all("class_version" not in state and "changed_paths" not in state for state in states)
    assert version == 1


def test_old_settings_changes_read_back_with_the_paths_they_wrote(store) -> None:
    changes = [
        event.payload["changed_paths"]
        for event in store.event_log(run_id=SETTINGS_RUN)
        if event.wire_name == "settings.changed"
    ]

    assert changes == SETTINGS_PATHS


def test_the_settings_model_answers_at_version_2_with_each_changes_paths(
    upgraded_url: str,
) -> None:
    with open_runtime(upgraded_url) as runtime:
        status = {state.name: state for state in runtime.projection_status()}
        scope_id = f"{SETTINGS_RUN}:$root:1"
        rows = runtime.views.reader().scan(
            settings.CHANGES, equals={"scope_id": scope_id}, order_by="change_number"
        )

    assert (status["settings"].version, status["settings"].lag) == (2, 0)
    assert [row["changed_paths"] for row in rows] == SETTINGS_PATHS


def test_the_settings_queries_answer_as_before_the_upgrade(store) -> None:
    scope_id = f"{SETTINGS_RUN}:$root:1"
    values = [
        event.payload["settings"]
        for event in store.event_log(run_id=SETTINGS_RUN)
        if event.wire_name == "settings.changed"
    ]

    for number, value in enumerate(values, start=1):
        scope = store.settings_scope_at_change(scope_id, number)
        assert scope is not None
        assert (scope.change_number, scope.settings) == (number, value)
    assert values[-1] == {
        "mode": "strict",
        "notes": ["second"],
        "limits": {"tokens": 4096, "ceiling": 4096},
    }
    assert len(values) == len(PATCHES)


def test_every_model_equals_a_fresh_reprojection_of_the_whole_log(upgraded_url: str) -> None:
    with open_runtime(upgraded_url) as runtime:
        live = digests(runtime.views)
        entries = runtime.storage.read_log(after=0, limit=10_000)
    fresh = reproject(entries, default_projections())

    assert fresh.stalls == {}
    assert live == {name: outcome["digest"] for name, outcome in fresh.digests().items()}


def legacy_digests(path: Path) -> tuple[dict[str, int], dict[str, str]]:
    """The versions of the read models exactly as the previous code left them, and the
    digests of those this code declares at the same version:
    tables under their logical names, positions in the old tracking table, read with sqlite3
    so that no code of ours migrates, resets or rebuilds anything first."""
    connection = sqlite3.connect(path)
    try:
        versions = {
            str(name): int(version)
            for name, version in connection.execute(
                "SELECT name, version FROM runledger_projections"
            )
        }
        found: dict[str, str] = {}
        for projection in default_projections():
            if (
                not rows_version(projection)
                <= versions.get(projection.name, 0)
                <= projection.version
            ):
                continue  # its rows have another shape: that model changed
            tables = []
            for table in projection.tables:
                columns = ", ".join(f'"{column}"' for column in table.column_names)
                stored = connection.execute(f'SELECT {columns} FROM "{table.name}"').fetchall()
                rows = [
                    decode_row(table, dict(zip(table.column_names, row, strict=True)))
                    for row in stored
                ]
                tables.append((table, rows))
            found[projection.name] = digest_rows(projection.name, rows_version(projection), tables)
    finally:
        connection.close()
    return versions, found


def test_the_models_that_did_not_change_keep_exactly_their_rows(tmp_path: Path) -> None:
    before_folder = tmp_path / "before"
    before_folder.mkdir()
    _, before = legacy_digests(fixture_copy(before_folder))
    # Models whose rows changed since the fixture was written (settings, for the schema
    # change; viewer_deltas, for its compact rows) are rebuilt, the others must keep their
    # rows: the session outbox too, rebuilt at version 2 only to keep its content packed.
    unchanged = set(before)
    assert "settings" not in unchanged
    assert "session_outbox" in unchanged
    assert unchanged
    upgraded = fixture_copy(tmp_path)
    with open_runtime(f"sqlite:///{upgraded}") as runtime:
        after = digests(runtime.views, unchanged)

    assert after == before


def test_sqlite_and_postgresql_give_the_upgraded_models_the_same_digests(
    tmp_path: Path, postgres_store_url: str
) -> None:
    copy = fixture_copy(tmp_path)
    with open_runtime(f"sqlite:///{copy}") as runtime:
        on_sqlite = digests(runtime.views)
    source = SQLiteStorage(copy)
    try:
        with open_runtime(postgres_store_url, embedded_projections=False) as runtime:
            copy_events(source, runtime.storage)
    finally:
        source.close()
    with open_runtime(postgres_store_url) as runtime:
        on_postgres = digests(runtime.views)

    assert on_postgres == on_sqlite


@pytest.mark.parametrize("run_id", [FAILED_RUN, SETTINGS_RUN])
def test_the_upgraded_runs_verify(store, run_id: str) -> None:
    verdict = store.verify_run(run_id)

    assert verdict.ok, verdict.difference


def test_the_audit_of_an_upgraded_run_says_what_each_old_change_wrote(store) -> None:
    summaries = [
        entry.summary
        for entry in store.audit_run(SETTINGS_RUN).entries
        if entry.wire_name == "settings.changed"
    ]

    assert summaries[-1].startswith("change #6 by fixture wrote /limits/budget, /limits/ceiling")


def test_an_upgraded_run_exports_its_old_events_as_stored_and_the_bundle_verifies(
    store, tmp_path: Path
) -> None:
    bundle = tmp_path / "failed.jsonl"
    store.export_run(FAILED_RUN, bundle)
    lines = read_lines(bundle)
    changes = [
        line["event"]["state"]
        for line in lines[1:-1]
        if line["event"]["wire_name"] == "settings.changed"
    ]

    assert changes
    assert all("changed_paths" not in state for state in changes)
    assert lines[0]["catalogue"]["settings.changed"]["class_version"] == 2
    assert verify_bundle(bundle).ok


OUTBOX_SESSION: Final = "pi-v1fix"
RETIRED_OUTBOX_INDEX: Final = ("target_session_id", "session_order")
"""Declared on the session outbox's messages until the session's whole outbox read could use
the (session, status, order) index and sort: it cost a page of every message written."""


def _outbox_index_name(views: ViewStore) -> str:
    slot = views.registry(session_outbox.SessionOutboxProjection.name).active
    assert slot is not None
    return _index_name(views.physical_name(session_outbox.MESSAGES, slot), RETIRED_OUTBOX_INDEX)


def _index_exists(views: ViewStore, name: str) -> bool:
    return views._kind(None, name) == "index"  # type: ignore[attr-defined]


def test_an_index_no_query_needs_is_dropped_when_the_store_opens(upgraded_url: str) -> None:
    with sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True) as connection:
        written = [
            name
            for (name,) in connection.execute(
                "SELECT name FROM sqlite_master WHERE name = 'rl_so_messages_"
                "target_session_id_session_order_idx'"
            )
        ]
        expected = [
            message_id
            for (message_id,) in connection.execute(
                "SELECT workflow_message_id FROM rl_so_messages WHERE target_session_id = ? "
                "ORDER BY session_order",
                (OUTBOX_SESSION,),
            )
        ]
    assert len(written) == 1, "the old code wrote the index"
    assert len(expected) == 9
    with open_runtime(upgraded_url) as runtime:
        name = _outbox_index_name(runtime.views)
        dropped_at_first_open = not _index_exists(runtime.views, name)
        # A process of the earlier release opening the store makes it again.
        table = dataclasses.replace(session_outbox.MESSAGES, indexes=(RETIRED_OUTBOX_INDEX,))
        physical = name.removesuffix("_" + "_".join(RETIRED_OUTBOX_INDEX) + "_idx")
        with runtime.views._transaction() as cursor:  # type: ignore[attr-defined]
            for statement in _index_ddl(table, runtime.views.dialect, physical):  # type: ignore[attr-defined]
                cursor.execute(statement)
        assert _index_exists(runtime.views, name)
    with open_store(upgraded_url) as store, open_runtime(upgraded_url) as runtime:
        outbox = [message.workflow_message_id for message in store.session_outbox(OUTBOX_SESSION)]
        again = _index_exists(runtime.views, name)

    assert (dropped_at_first_open, again) == (True, False)
    assert outbox == expected
