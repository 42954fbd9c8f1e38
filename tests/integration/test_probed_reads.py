"""A query on PostgreSQL checks the log in the round trip of its first read
(``storage.log_probes``): one round trip fewer than catching up first, and never an answer
from views behind a commit made before the query, by this store or another one.

The round trips are counted by a proxy in front of the server (what a host across a network
pays for each). What any store promises, that a query sees every commit made before it, holds
on a SQLite file too, whose views' connection probes after the read, and through a
transaction pooler."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import pytest

from runledger.domain.records import SnapshotRequired, ViewerDeltas
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.integration.conftest import BACKENDS, POOLED, every_process_projects
from tests.integration.test_same_commit_views import queue_as_session
from tests.support.round_trips import RoundTripProxy, round_trip_proxy
from tests.support.scenario import RUN, SESSION, running_run
from tests.support.workers import Round, run_race


def usual_trips(proxy: RoundTripProxy, read: Callable[[], object], tries: int = 7) -> int:
    """The round trips ``read`` takes most often: the store's own threads (the follower's
    idle look) may talk to the server during one try, and a try whose first message meets
    one the proxy has not seen answered yet counts a trip short."""
    counts = []
    for _ in range(tries):
        before = proxy.trips
        read()
        counts.append(proxy.trips - before)
    return Counter(counts).most_common(1)[0][0]


def assert_round_trips(proxy: RoundTripProxy, store: WorkflowStore, queued: list[str]) -> None:
    """Each query of ``store`` (its run ``RUN`` holding the follow-ups ``queued``) answers
    right in as many round trips as its own reads need: one each, two for a queue (the run's
    row, then its follow-ups; one when the run is unknown)."""

    def queue_page() -> None:
        page = store.follow_up_queue_range(RUN, start=1, limit=2)
        assert page is not None
        assert [f.follow_up_id for f in page.follow_ups] == queued[1:]

    def runs() -> None:
        assert [run.run_id for run in store.list_runs().runs] == [RUN]

    def outbox() -> None:
        assert len(store.session_outbox(SESSION)) == len(queued)

    def deltas() -> None:
        assert isinstance(
            store.viewer_deltas(RUN, after_revision=0), ViewerDeltas | SnapshotRequired
        )

    def whole_queue() -> None:
        queue = store.follow_up_queue(RUN)
        assert queue is not None
        assert [f.follow_up_id for f in queue.follow_ups] == queued

    def unknown_run() -> None:
        assert store.follow_up_queue_range("no-such-run", start=0, limit=2) is None

    for read, trips in (
        (runs, 1),
        (outbox, 1),
        (deltas, 1),
        (queue_page, 2),
        (whole_queue, 2),
        (unknown_run, 1),
    ):
        for _ in range(3):
            read()  # the pool's connections are open, the statements prepared
        assert usual_trips(proxy, read) == trips, read.__name__


@pytest.mark.postgres
def test_a_query_checks_the_log_in_the_round_trip_of_its_first_read(
    postgres_store_url: str,
) -> None:
    with (
        round_trip_proxy(postgres_store_url) as proxy,
        open_store(proxy.url(postgres_store_url)) as store,
    ):
        running_run(store, session_id=SESSION)
        queued = [queue_as_session(store, RUN, f"request-{n}") for n in range(3)]

        # Before: a read of the log past the views' position, then the query's own reads.
        assert_round_trips(proxy, store, queued)


def assert_reads_follow(reader: WorkflowStore, writer: Callable[[int], WorkflowStore]) -> None:
    """Twenty times: ``writer(n)`` queues a follow-up on ``RUN`` and creates a run with an
    origin session, and ``reader`` shows each at once."""
    for n in range(20):
        follow_up_id = queue_as_session(writer(n), RUN, f"request-{n}")
        page = reader.follow_up_queue_range(RUN, start=n, limit=1)
        assert page is not None
        assert [f.follow_up_id for f in page.follow_ups] == [follow_up_id]

        run_id = f"run-{n + 2}"
        writer(n).create_run(run_id, workflow_name="wf", input={})
        # A query that raises on views without the run must not raise: it reads again.
        assert isinstance(
            reader.viewer_deltas(run_id, after_revision=0), ViewerDeltas | SnapshotRequired
        )
        assert reader.list_runs(after=run_id).runs == []
        # A queue's page reads the new run's row with its follow-ups: both as committed.
        writer(n).bind_origin_session(run_id, f"{SESSION}-{n}")
        fresh = reader.follow_up_queue_range(run_id, start=0, limit=1)
        assert fresh is not None
        assert (fresh.origin_session_id, fresh.follow_ups) == (f"{SESSION}-{n}", [])


@pytest.mark.parametrize("store_url", [*BACKENDS[1:], POOLED], indirect=True)
def test_a_query_sees_what_a_store_that_does_not_project_committed_just_before_it(
    store_url: str,
) -> None:
    """The writer leaves its commits to the reader's projections (as a host process without
    embedded projections does), so the reader's query finds the log past its views."""
    with (
        open_store(store_url) as reader,
        open_runtime(store_url, embedded_projections=False) as runtime,
    ):
        writer = WorkflowStore(runtime)
        running_run(writer, session_id=SESSION)
        assert_reads_follow(reader, lambda _: writer)


@pytest.mark.postgres
@pytest.mark.parametrize("projecting", ["elected", "every"])
def test_a_query_sees_what_another_projecting_store_committed_just_before_it(
    postgres_store_url: str, projecting: str
) -> None:
    """Two stores that project: elected, the writer (opened second) commits its events alone
    and the reader leads; with ``every``, each projects its own commits."""
    url = (
        every_process_projects(postgres_store_url) if projecting == "every" else postgres_store_url
    )
    with open_store(url) as reader, open_store(url) as writer:
        running_run(writer, session_id=SESSION)
        assert_reads_follow(reader, lambda _: writer)


@pytest.mark.postgres
def test_a_store_that_waits_for_the_leader_checks_the_views_in_the_same_round_trip(
    postgres_store_url: str,
) -> None:
    """Elected: the second store waits for the first to project. It used to ask the log's
    head and the views' positions (two round trips) before the query's own reads."""
    with (
        round_trip_proxy(postgres_store_url) as proxy,
        open_store(postgres_store_url) as leader,
        open_store(proxy.url(postgres_store_url)) as follower,
    ):
        running_run(leader, session_id=SESSION)
        queued = [queue_as_session(leader, RUN, f"request-{n}") for n in range(3)]
        assert not follower._runtime.leads_projection

        assert_round_trips(proxy, follower, queued)


@pytest.mark.postgres
def test_a_store_that_waits_for_the_leader_sees_its_own_and_the_leaders_commits(
    postgres_store_url: str,
) -> None:
    """The follower commits its events alone and the leader projects them a moment later:
    a query made at once finds the views short of the head and waits for them."""
    with open_store(postgres_store_url) as leader, open_store(postgres_store_url) as follower:
        running_run(leader, session_id=SESSION)
        assert not follower._runtime.leads_projection
        assert_reads_follow(follower, lambda n: follower if n % 2 else leader)


def test_two_writer_processes_on_one_run_each_read_their_own_follow_up_at_once(
    durable_url: str,
) -> None:
    """Two processes queue on one run, each reading the queue right after each of its
    commands: on PostgreSQL one leads and the other waits for it, on SQLite both project."""
    with open_store(durable_url) as setup:
        running_run(setup, session_id=SESSION)
    per_worker = 30
    plan: Round = [
        [
            op
            for i in range(per_worker)
            for op in (
                {
                    "op": "queue",
                    "run_id": RUN,
                    "request_id": f"w{worker}-{i}",
                    "target_session_id": SESSION,
                    "actor": {"type": "session", "id": SESSION},
                    "source": "race",
                    "prompt": f"w{worker}-{i}",
                },
                {"op": "call", "method": "follow_up_queue", "args": [RUN]},
            )
        ]
        for worker in range(2)
    ]

    outcomes = sorted(run_race(durable_url, [plan]).round(0), key=lambda o: (o.worker, o.index))

    assert all(o.ok for o in outcomes), [o.describe() for o in outcomes if not o.ok]
    for queued, read in zip(outcomes[::2], outcomes[1::2], strict=True):
        assert (queued.op["op"], read.op["op"]) == ("queue", "call")
        assert queued.result is not None
        assert read.result is not None
        seen = [f["follow_up_id"] for f in read.result["follow_ups"]]
        assert queued.result["follow_up"]["follow_up_id"] in seen, queued.describe()
        orders = [f["order"] for f in read.result["follow_ups"]]
        assert orders == list(range(1, len(orders) + 1))
