"""A store through a real PgBouncer in transaction mode (``pooler=transaction``).

Each transaction may run on another server session there, so nothing may outlive one: no
prepared statement, no session setting, no LISTEN. These tests hold the rest of the store to
that: many processes on one run, a projection worker (polling, or hearing commits through
``listen_url``), blue/green rebuilds and their verification, and group commit. The scenario
suites run their PostgreSQL leg through the pooler too (``tests/integration/conftest.py``).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from urllib.parse import quote

import psycopg
import pytest

from runledger.domain import Actor
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.serve.notifications import commit_notifications
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.clusters import PgBouncer, owned_scratch_folder, pooled
from tests.support.workers import Op, run_race

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]

CLI = (sys.executable, "-m", "runledger.infrastructure.cli")
RUN = "run-pooled"
SESSION = "session-pooled"
ACTOR = {"type": "session", "id": SESSION}


def direct_url(pgbouncer: PgBouncer, pooled_url: str) -> str:
    """The same database, on the server itself (no pooler, no runledger parameters)."""
    database = pooled_url.split("?", 1)[0].rsplit("/", 1)[1]
    return pgbouncer.server.url(database)


def start_run(url: str) -> None:
    with open_store(url) as store:
        store.create_run(RUN, workflow_name="pooled", input={})
        store.bind_origin_session(RUN, SESSION)


def queue(store: WorkflowStore, request_id: str) -> None:
    store.queue_follow_up(
        RUN,
        request_id=request_id,
        target_session_id=SESSION,
        actor=Actor("session", SESSION),
        source="pooler-test",
        prompt=f"prompt {request_id}",
    )


def cli(*arguments: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *arguments], capture_output=True, text=True, timeout=300, check=False
    )


@pytest.fixture
def single_session(pgbouncer: PgBouncer) -> Iterator[PgBouncer]:
    """A second PgBouncer in front of the same cluster with one server session in all: every
    client transaction runs on it, so whatever a client left on a session is there to see."""
    root = owned_scratch_folder("runledger-pooler-one-")
    try:
        with pooled(pgbouncer.server, root, pool_size=1) as bouncer:
            yield bouncer
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_no_prepared_statement_or_session_setting_is_left_on_the_server(
    pgbouncer_store_url: str, pgbouncer: PgBouncer, single_session: PgBouncer
) -> None:
    database = pgbouncer_store_url.split("?", 1)[0].rsplit("/", 1)[1]
    url = single_session.url(database)
    start_run(url)
    with open_store(url) as store:
        for number in range(20):
            queue(store, f"request-{number}")
        assert store.follow_up_queue(RUN) is not None
        store.rebuild_projection("follow_up_queue")
    with psycopg.connect(single_session.url(database, query=""), prepare_threshold=None) as conn:
        prepared = conn.execute("SELECT name FROM pg_prepared_statements").fetchall()
        timeout = conn.execute("SHOW idle_in_transaction_session_timeout").fetchone()
    assert prepared == []
    assert timeout == ("0",)


@pytest.mark.slow
def test_four_processes_queue_two_thousand_follow_ups_on_one_run_without_loss(
    pgbouncer_store_url: str,
) -> None:
    start_run(pgbouncer_store_url)
    plan: list[list[Op]] = [
        [
            {
                "op": "queue",
                "run_id": RUN,
                "request_id": f"w{worker}-{number}",
                "target_session_id": SESSION,
                "actor": ACTOR,
                "source": "pooler-test",
                "prompt": f"{worker}/{number}",
            }
            for number in range(500)
        ]
        for worker in range(4)
    ]
    race = run_race(pgbouncer_store_url, [plan], time_budget=300, timeout=600)
    outcomes = race.all()
    failed = [outcome.describe() for outcome in outcomes if not outcome.ok]
    assert not failed, failed[:3]
    acknowledged = {
        o.op["request_id"]: o.result["follow_up"]["order"] for o in outcomes if o.result
    }
    assert len(acknowledged) == 2000
    with open_store(pgbouncer_store_url) as store:
        stored = store.follow_up_queue(RUN)
    assert stored is not None
    assert {item.request_id: item.order for item in stored.follow_ups} == acknowledged
    assert sorted(acknowledged.values()) == list(range(1, 2001))


def _worker_projects(url: str, writes_at: str, *, poll: str, within: float) -> float:
    """Start a worker on ``url``, queue a follow-up through ``writes_at`` (a store that does not
    project) and return how long the worker took to make it readable."""
    worker = subprocess.Popen(
        [*CLI, "projections", "run", "--url", url, "--poll", poll],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        with open_store(writes_at, embedded_projections=False) as store:
            time.sleep(1.0)  # the worker is up and idle, waiting on its poll or a notification
            queue(store, "late")
            written = time.monotonic()
            while time.monotonic() - written < within:
                answer = store.follow_up_queue(RUN)
                if answer is not None and [f.request_id for f in answer.follow_ups] == ["late"]:
                    return time.monotonic() - written
                time.sleep(0.02)
        pytest.fail(f"the worker did not project the follow-up within {within} s")
    finally:
        worker.terminate()
        worker.wait(timeout=30)


def test_a_worker_through_the_pooler_catches_up_by_polling(pgbouncer_store_url: str) -> None:
    start_run(pgbouncer_store_url)
    _worker_projects(pgbouncer_store_url, pgbouncer_store_url, poll="0.2", within=10)


def test_a_worker_with_a_listen_url_hears_commits_made_through_the_pooler(
    pgbouncer_store_url: str, pgbouncer: PgBouncer
) -> None:
    start_run(pgbouncer_store_url)
    listen = quote(direct_url(pgbouncer, pgbouncer_store_url), safe="")
    # A poll of a minute: only a notification makes the worker project within seconds.
    took = _worker_projects(
        f"{pgbouncer_store_url}&listen_url={listen}",
        pgbouncer_store_url,
        poll="60",
        within=20,
    )
    assert took < 20


def test_blue_green_rebuilds_and_verification_work_through_the_pooler(
    pgbouncer_store_url: str,
) -> None:
    start_run(pgbouncer_store_url)
    with open_store(pgbouncer_store_url) as store:
        for number in range(50):
            queue(store, f"request-{number}")
        before = store.read_model_digest("follow_up_queue")
    rebuilt = cli("projections", "rebuild", "--all", "--url", pgbouncer_store_url)
    assert rebuilt.returncode == 0, rebuilt.stdout + rebuilt.stderr
    verified = cli("projections", "verify", "--all", "--url", pgbouncer_store_url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    with open_store(pgbouncer_store_url) as store:
        assert store.read_model_digest("follow_up_queue") == before
        statuses = {status.name: status for status in store.projection_status()}
    assert all(status.lag == 0 and status.building_version is None for status in statuses.values())


def test_writer_threads_of_one_store_group_their_commits_through_the_pooler(
    pgbouncer_store_url: str,
) -> None:
    start_run(pgbouncer_store_url)
    errors: list[BaseException] = []
    with open_store(pgbouncer_store_url) as store:

        def write(thread: int) -> None:
            try:
                for number in range(50):
                    queue(store, f"t{thread}-{number}")
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=write, args=(thread,)) for thread in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=120)
        answer = store.follow_up_queue(RUN)
    assert errors == []
    assert answer is not None
    assert sorted(item.order for item in answer.follow_ups) == list(range(1, 201))


def test_through_the_pooler_a_store_hears_commits_of_another_process_without_listen(
    pgbouncer_store_url: str,
) -> None:
    told = threading.Event()
    with open_runtime(pgbouncer_store_url) as runtime:
        # No session may LISTEN through the pooler: nothing tries, the follower's look finds
        # the other process's commit instead.
        assert runtime.listen_conninfo is None
        assert commit_notifications(runtime, told.set) is None
        runtime.add_views_listener(told.set)
        told.clear()
        start_run(pgbouncer_store_url)
        assert told.wait(timeout=10)


def test_with_a_listen_url_serve_listens_on_the_server_itself(
    pgbouncer_store_url: str, pgbouncer: PgBouncer
) -> None:
    direct = direct_url(pgbouncer, pgbouncer_store_url)
    url = f"{pgbouncer_store_url}&listen_url={quote(direct, safe='')}"
    told = threading.Event()
    with open_runtime(url) as runtime:
        notifications = commit_notifications(runtime, told.set)
        assert notifications is not None
        notifications.start()
        try:
            deadline = time.monotonic() + 10
            while not notifications.listening.is_set() and time.monotonic() < deadline:
                time.sleep(0.02)
            told.clear()
            start_run(pgbouncer_store_url)
            assert told.wait(timeout=10)
        finally:
            notifications.stop()
