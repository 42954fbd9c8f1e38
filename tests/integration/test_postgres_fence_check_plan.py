"""A fenced command's check reads the fenced aggregate's index entries, never the whole log,
however much the log grew since the server session first ran the check.

A session keeps a query's generic plan; one chosen while the log was small scanned all of it,
so every fenced command (a session write checks its run's claim) cost more as the log grew.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from runledger.infrastructure import open_store

pytestmark = pytest.mark.postgres

CHECK = "SELECT runledger_check_fences(ARRAY[%s]::uuid[], ARRAY[%s]::bigint[], ARRAY[%s]::text[])"
ROWS_SCANNED = "SELECT pg_stat_get_xact_tuples_returned('runledger_events'::regclass)"


def test_the_fence_check_probes_the_index_after_the_log_grew(postgres_store_url: str) -> None:
    with open_store(postgres_store_url) as store:
        store.create_run("run-1", workflow_name="echo", input={})
    with (
        psycopg.connect(postgres_store_url, autocommit=True) as session,
        psycopg.connect(postgres_store_url, autocommit=True) as writer,
    ):
        row = session.execute(
            "SELECT originator_id, topic FROM runledger_events ORDER BY position LIMIT 1"
        ).fetchone()
        assert row is not None
        fence: tuple[Any, ...] = (row[0], 1_000, row[1])
        # Plans made (and a generic one chosen) while the log holds one event.
        for _ in range(12):
            session.execute(CHECK, fence)
        writer.execute(
            "INSERT INTO runledger_events (originator_id, originator_version, topic, state) "
            "SELECT gen_random_uuid(), 1, 'bench.filler', '\\x7b7d'::bytea "
            "FROM generate_series(1, 20000)"
        )
        with session.transaction():
            for _ in range(5):
                session.execute(CHECK, fence)
            scanned = session.execute(ROWS_SCANNED).fetchone()
        assert scanned is not None
        # Scanning the log would read its 20,001 rows at each of the five checks.
        assert scanned[0] < 100


def test_a_broken_fence_is_still_found(postgres_store_url: str) -> None:
    with open_store(postgres_store_url) as store:
        store.create_run("run-1", workflow_name="echo", input={})
    with psycopg.connect(postgres_store_url, autocommit=True) as session:
        row = session.execute(
            "SELECT originator_id, topic FROM runledger_events ORDER BY position LIMIT 1"
        ).fetchone()
        assert row is not None
        session.execute(CHECK, (row[0], 5, "run.claimed"))  # no such event after 5: holds
        with pytest.raises(psycopg.Error, match="a fence of the insert is broken") as broken:
            session.execute(CHECK, (row[0], 0, row[1]))
        assert broken.value.sqlstate == "RLFN1"
