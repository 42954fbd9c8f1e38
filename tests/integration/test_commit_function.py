"""PostgreSQL commits a command as one call of a server-side function (DESIGN "Write path").

The read-model step's rows travel to it as text and are cast back to their columns' types on
the server: these tests pin that every value comes back as the same bytes, and that a view
write failing inside the call leaves the events committed and the views to catch up.
"""

from __future__ import annotations

import logging
import math

import psycopg
import pytest

from runledger.infrastructure.databases import as_text
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.storage.postgres import COMMIT_FUNCTION_NAME
from runledger.infrastructure.store import WorkflowStore
from tests.integration.test_same_commit_views import digests, queue_as_session
from tests.support.clock import FakeClock

pytestmark = pytest.mark.postgres

VALUES = [
    ("double precision", "float8send", 0.1),
    ("double precision", "float8send", -0.0),
    ("double precision", "float8send", 5e-324),
    ("double precision", "float8send", 1.7976931348623157e308),
    ("double precision", "float8send", 1 / 3),
    ("double precision", "float8send", math.inf),
    ("double precision", "float8send", -math.inf),
    ("double precision", "float8send", math.nan),
    ("bigint", "int8send", 2**63 - 1),
    ("bigint", "int8send", -(2**63)),
    ("boolean", "boolsend", True),
    ("boolean", "boolsend", False),
    ("text", "textsend", 'é "quoted" \\ {braces}, commas ✓ \n'),
    ("text", "textsend", ""),
]


@pytest.mark.parametrize(("kind", "send", "value"), VALUES)
def test_a_view_value_sent_as_text_is_stored_as_the_value_itself(
    postgres_url: str, kind: str, send: str, value: object
) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        row = connection.execute(
            f"SELECT {send}((%s::text[])[1]::{kind}), {send}(%s::{kind})",
            ([as_text(value)], value),
        ).fetchone()

    assert row is not None
    assert row[0] == row[1]


def test_a_null_view_value_stays_null(postgres_url: str) -> None:
    with psycopg.connect(postgres_url, autocommit=True) as connection:
        row = connection.execute(
            "SELECT (%s::text[])[1]::double precision IS NULL", ([as_text(None)],)
        ).fetchone()

    assert row == (True,)


def test_the_events_commit_alone_when_a_view_write_fails_inside_the_call(
    postgres_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    with open_runtime(postgres_store_url, clock=FakeClock()) as runtime:
        store = WorkflowStore(runtime)
        store.create_run("run-1", workflow_name="echo", input={})
        store.bind_origin_session("run-1", "session-1")
        queue_as_session(store, "run-1", "request-1")
        with psycopg.connect(postgres_store_url, autocommit=True) as admin:
            row = admin.execute(
                "SELECT tablename FROM pg_tables WHERE tablename LIKE 'rl_fuq_follow_ups_%'"
            ).fetchone()
            assert row is not None
            table = psycopg.sql.Identifier(row[0])
            # The next follow-up's row breaks this: its write fails on the server, after
            # the events' insert in the same call.
            admin.execute(
                psycopg.sql.SQL(
                    "ALTER TABLE {} ADD CONSTRAINT no_boom CHECK (prompt <> 'boom') NOT VALID"
                ).format(table)
            )
            written = runtime.stats.read_models_with_events

            with caplog.at_level(logging.ERROR, logger="runledger.infrastructure"):
                boom = queue_as_session(store, "run-1", "boom")

            assert runtime.stats.read_models_with_events == written
            assert any("read models not written" in r.getMessage() for r in caplog.records)
            admin.execute(psycopg.sql.SQL("ALTER TABLE {} DROP CONSTRAINT no_boom").format(table))
        after = queue_as_session(store, "run-1", "request-2")

        assert store.get_follow_up(boom) is not None
        queue = store.follow_up_queue("run-1")
        assert queue is not None
        assert [item.prompt for item in queue.follow_ups] == ["request-1", "boom", "request-2"]
        assert [item.follow_up_id for item in queue.follow_ups][-1] == after
        shown = digests(runtime)
        runtime.rebuild_projections()
        assert digests(runtime) == shown


def test_the_commit_function_is_installed_under_its_versioned_name(
    postgres_store_url: str,
) -> None:
    with open_runtime(postgres_store_url), psycopg.connect(postgres_store_url) as connection:
        found = connection.execute(
            "SELECT count(*) FROM pg_proc WHERE proname = %s", (COMMIT_FUNCTION_NAME,)
        ).fetchone()

    assert found == (1,)


def test_json_view_columns_are_compressed_with_lz4_and_read_back_as_written(
    postgres_store_url: str,
) -> None:
    with open_runtime(postgres_store_url, clock=FakeClock()) as runtime:
        store = WorkflowStore(runtime)
        store.create_run("run-1", workflow_name="echo", input={})
        store.bind_origin_session("run-1", "session-1")
        # Enough follow-ups that the run's viewer row (its window of follow-ups) is stored
        # compressed, out of line.
        for number in range(120):
            queue_as_session(store, "run-1", f"request-{number}-{'x' * 40}")
        shown = digests(runtime)
        with psycopg.connect(postgres_store_url) as connection:
            supported = connection.execute(
                "SELECT 'lz4' = ANY(enumvals) FROM pg_settings "
                "WHERE name = 'default_toast_compression'"
            ).fetchone()
            columns = connection.execute(
                "SELECT a.attname, a.attcompression FROM pg_attribute a "
                "JOIN pg_class c ON c.oid = a.attrelid "
                "WHERE c.relname LIKE 'rl_vd_runs_v%%' AND a.attnum > 0 ORDER BY a.attnum"
            ).fetchall()
            compressed = connection.execute(
                "SELECT pg_column_compression(follow_ups) FROM rl_vd_runs WHERE run_id = 'run-1'"
            ).fetchone()
        runtime.rebuild_projections()
        rebuilt = digests(runtime)

    assert supported == (True,)
    json_columns = {"graph", "follow_ups", "settings", "session"}
    assert {name for name, method in columns if method == "l"} == json_columns
    assert compressed == ("lz4",)
    assert rebuilt == shown
