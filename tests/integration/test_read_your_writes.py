"""A query catches the read models up first (read-your-writes); when that catch-up fails, the
query fails with ``ReadModelsBehindError`` instead of answering from views that miss this
process's own commits, and answers again once the views can catch up. On a SQLite file and
PostgreSQL, whose view tables another connection can take away (memory has no such fault).
"""

from __future__ import annotations

import pytest

from runledger.domain.errors import ReadModelsBehindError
from runledger.infrastructure.cli.bench.baselines import plain_connection
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.projections.follow_up_queue import FOLLOW_UPS
from tests.integration.test_same_commit_views import queue_as_session
from tests.support.scenario import RUN, running_run


def rename(url: str, old: str, new: str) -> None:
    with plain_connection(url) as connection:
        connection.execute(f'ALTER TABLE "{old}" RENAME TO "{new}"')


def test_a_query_whose_catch_up_fails_is_refused_not_answered_stale(durable_url: str) -> None:
    with open_runtime(durable_url) as runtime:
        store = WorkflowStore(runtime)
        running_run(store, session_id="session-1")
        table = runtime.views.physical_name(FOLLOW_UPS, runtime.views.active_slot(FOLLOW_UPS))
        rename(durable_url, table, f"{table}_away")

        # The command commits its events; only its read models cannot follow.
        follow_up_id = queue_as_session(store, RUN, "request-1")

        with pytest.raises(ReadModelsBehindError) as raised:
            store.follow_up_queue(RUN)
        assert raised.value.retryable
        assert str(raised.value).startswith("Read models could not catch up with the event log: ")
        rename(durable_url, f"{table}_away", table)
        queue = store.follow_up_queue(RUN)
        assert queue is not None
        assert [f.follow_up_id for f in queue.follow_ups] == [follow_up_id]
