"""A live page of the read models (a projection worker's, or a follower's catch-up on
another process's commits) commits in one round trip on PostgreSQL: ``BEGIN``, the tracking
move, the rows and ``COMMIT`` in one pipeline. ``connection.transaction()`` synced at each
block it opened (a worker took six round trips a command, now three)."""

from __future__ import annotations

import logging
from collections import Counter

import pytest

from runledger.infrastructure.cli.bench.baselines import plain_connection
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.integration.test_same_commit_views import queue_as_session
from tests.support.round_trips import round_trip_proxy
from tests.support.scenario import RUN, SESSION, running_run

pytestmark = pytest.mark.postgres


def test_a_live_page_reads_the_log_and_commits_in_two_round_trips(postgres_store_url: str) -> None:
    with (
        round_trip_proxy(postgres_store_url) as proxy,
        open_runtime(proxy.url(postgres_store_url), embedded_projections=False) as projecting,
        open_store(postgres_store_url, embedded_projections=False) as writer,
    ):
        running_run(writer, session_id=SESSION)
        projecting.catch_up()
        counts = []
        for n in range(12):
            queue_as_session(writer, RUN, f"request-{n}")
            before = proxy.trips
            assert projecting.catch_up() == 3  # the follow-up and its two messages' events
            counts.append(proxy.trips - before)
        # The first pages also fetch rows their cache does not hold yet. Then: the log's
        # page, and the page's commit (the most common count: a try can meet the follower's
        # idle look).
        assert Counter(counts[5:]).most_common(1)[0][0] == 2, counts
        queue = WorkflowStore(projecting).follow_up_queue(RUN)
        assert queue is not None
        assert len(queue.follow_ups) == 12


def test_a_page_whose_tracking_moved_rolls_back_and_leaves_no_transaction_open(
    postgres_store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Two processes project the same commit: the later page finds the tracking moved (the
    move function raises inside the pipeline, the server skips the COMMIT). It is given up,
    and its connection goes back to the pool idle, not aborted (the pool would warn)."""
    caplog.set_level(logging.WARNING)
    with (
        open_store(postgres_store_url, embedded_projections=False) as writer,
        open_runtime(postgres_store_url, embedded_projections=False) as first,
        open_runtime(postgres_store_url, embedded_projections=False) as second,
    ):
        running_run(writer, session_id=SESSION)
        first.catch_up()
        second.catch_up()
        queue_as_session(writer, RUN, "request-1")
        first.catch_up()
        second.catch_up()

        assert not [r for r in caplog.records if r.name.startswith("psycopg")], caplog.text
        assert second.projector.runner("follow_up_queue").position == first.storage.max_position()
        with plain_connection(postgres_store_url) as connection:
            open_transactions = connection.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND state LIKE 'idle in transaction%'"
            ).fetchone()
        assert open_transactions == (0,)
        queue = WorkflowStore(second).follow_up_queue(RUN)
        assert queue is not None
        assert [f.request_id for f in queue.follow_ups] == ["request-1"]
