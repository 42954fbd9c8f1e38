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


def first_event(url: str) -> tuple[Any, str]:
    """A store's one run created: its first event's aggregate id and wire name."""
    with open_store(url) as store:
        store.create_run("run-1", workflow_name="echo", input={})
    with psycopg.connect(url) as connection:
        row = connection.execute(
            "SELECT originator_id, topic FROM runledger_events ORDER BY position LIMIT 1"
        ).fetchone()
    assert row is not None
    return row[0], row[1]


def test_the_fence_check_probes_the_index_after_the_log_grew(postgres_store_url: str) -> None:
    aggregate_id, topic = first_event(postgres_store_url)
    with (
        psycopg.connect(postgres_store_url, autocommit=True) as session,
        psycopg.connect(postgres_store_url, autocommit=True) as writer,
    ):
        fence = (aggregate_id, 1_000, topic)
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
    aggregate_id, topic = first_event(postgres_store_url)
    with psycopg.connect(postgres_store_url, autocommit=True) as session:
        session.execute(CHECK, (aggregate_id, 5, "run.claimed"))  # none after 5: it holds
        with pytest.raises(psycopg.Error, match="a fence of the insert is broken") as broken:
            session.execute(CHECK, (aggregate_id, 0, topic))
        assert broken.value.sqlstate == "RLFN1"
