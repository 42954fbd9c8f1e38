"""A rebuild leaves the planner statistics of its new tables, gathered from a sample.

Tables filled by a build are new to the planner; the build analyses them before they go live,
from a sample of 3,000 rows (``ANALYZE_TARGET``) rather than the server's default of 30,000,
which read most tables whole and cost 8 % of a rebuild.
"""

from __future__ import annotations

import psycopg
import pytest

from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime

pytestmark = pytest.mark.postgres


def test_a_rebuild_analyses_its_new_tables_at_the_build_target(postgres_store_url: str) -> None:
    with open_runtime(postgres_store_url, embedded_projections=False) as runtime:
        for batch in HistoryGenerator(prefix="stats").batches(4_000):
            runtime.storage.events.insert_events(batch)
        runtime.rebuild_projections()
    with psycopg.connect(postgres_store_url) as connection:
        rows = connection.execute(
            "SELECT s.tablename, s.attname, cardinality(s.histogram_bounds::text::text[]), "
            "c.reltuples FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename "
            "WHERE s.schemaname = current_schema() AND s.tablename LIKE 'rl\\_fuq\\_follow\\_ups%' "
            "AND s.attname = 'follow_up_id'"
        ).fetchall()
        follow_ups = connection.execute(
            "SELECT count(*) FROM runledger_events WHERE topic = 'follow-up.queued'"
        ).fetchone()
    assert follow_ups is not None
    assert follow_ups[0] > 200
    # One live table, analysed: its row count known, its distinct keys in a histogram of
    # ten buckets (the server's default target gives a hundred for as many keys).
    assert len(rows) == 1
    _, _, bounds, tuples = rows[0]
    assert tuples == follow_ups[0]
    assert bounds == 11
