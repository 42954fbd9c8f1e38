"""Opening a PostgreSQL store makes its tables and functions once: the events and snapshots
tables carry the stamp of the statements that made them, an open that finds its own stamp
runs none of them, and a stamp of other statements (another release) makes them again."""

from __future__ import annotations

import psycopg
import pytest

from runledger.infrastructure import open_store

pytestmark = pytest.mark.postgres

FUNCTION_ROWS = (
    "SELECT p.proname, p.xmin::text FROM pg_proc p JOIN pg_namespace n "
    "ON n.oid = p.pronamespace WHERE n.nspname = 'public' AND p.proname LIKE 'runledger%' "
    "ORDER BY 1"
)
STAMPS = (
    "SELECT obj_description('runledger_events'::regclass), "
    "obj_description('runledger_snapshots'::regclass)"
)


def read(url: str, statement: str) -> list[tuple[object, ...]]:
    with psycopg.connect(url) as connection:
        return connection.execute(statement).fetchall()


def test_an_open_that_finds_its_stamp_replaces_no_function(postgres_store_url: str) -> None:
    open_store(postgres_store_url).close()
    before = read(postgres_store_url, FUNCTION_ROWS)
    stamps = read(postgres_store_url, STAMPS)

    with open_store(postgres_store_url) as store:
        store.create_run("run-1", workflow_name="echo", input={})

    # CREATE OR REPLACE FUNCTION writes a new row version (a new xmin) even for the same body.
    assert len(before) >= 5
    assert read(postgres_store_url, FUNCTION_ROWS) == before
    assert read(postgres_store_url, STAMPS) == stamps
    assert all(str(stamp).startswith("runledger schema ") for stamp in stamps[0])


def test_a_stamp_of_other_statements_makes_them_again(postgres_store_url: str) -> None:
    open_store(postgres_store_url).close()
    stamps = read(postgres_store_url, STAMPS)
    with psycopg.connect(postgres_store_url, autocommit=True) as connection:
        # What an earlier release left: its own stamp, and no lookup index yet.
        connection.execute("DROP INDEX runledger_events_lookup_key_idx")
        connection.execute("COMMENT ON TABLE runledger_events IS 'runledger schema 0000'")

    with open_store(postgres_store_url) as store:
        store.create_run("run-1", workflow_name="echo", input={})
        assert store.get_run("run-1") is not None

    index = read(
        postgres_store_url,
        "SELECT count(*) FROM pg_indexes WHERE indexname = 'runledger_events_lookup_key_idx'",
    )
    assert index == [(1,)]
    assert read(postgres_store_url, STAMPS) == stamps


def test_a_store_made_before_stamps_is_stamped_on_its_next_open(
    postgres_store_url: str,
) -> None:
    open_store(postgres_store_url).close()
    stamps = read(postgres_store_url, STAMPS)
    with psycopg.connect(postgres_store_url, autocommit=True) as connection:
        connection.execute("COMMENT ON TABLE runledger_events IS NULL")
        connection.execute("COMMENT ON TABLE runledger_snapshots IS NULL")

    open_store(postgres_store_url).close()

    assert read(postgres_store_url, STAMPS) == stamps
