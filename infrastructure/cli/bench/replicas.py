"""Row X2: a query right after a command, answered from a replica with the read-your-writes
wait included, next to the same on the primary alone.

A bench URL names one server; the row needs a streaming replica of it, so it is measured only
when the URL carries ``replica_url=`` (the other rows leave replicas out, see
``Scratch.new_url``), and is absent otherwise. The scratch database is made on the primary
and reaches the replica by replication; the replica's URL is pointed at it.
"""

from __future__ import annotations

import time
from typing import Final
from urllib.parse import quote, urlsplit, urlunsplit

import psycopg

from runledger.domain.values import Actor
from runledger.infrastructure.cli.bench.runner import Bench, BenchResult, percentile
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.storage.postgres import PostgresStorage
from runledger.infrastructure.storage.replicas import ReplicaStats
from runledger.infrastructure.storage.urls import libpq_url, read_postgres_url, redact_url
from runledger.infrastructure.store import WorkflowStore

REPLICA_APPEARS_SECONDS: Final = 60.0
"""How long the scratch database may take to reach the replica."""


def _on_database(url: str, database_path: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path=database_path))


def _await_database(replica_url: str) -> None:
    deadline = time.monotonic() + REPLICA_APPEARS_SECONDS
    while True:
        try:
            psycopg.connect(libpq_url(replica_url), connect_timeout=5).close()
            return
        except psycopg.Error:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)


def _latencies(url: str, samples: int, run_id: str) -> tuple[list[float], ReplicaStats]:
    """Milliseconds of ``follow_up_queue`` right after each ``queue_follow_up`` on a new run,
    and where the reads went."""
    with open_runtime(url) as runtime:
        store = WorkflowStore(runtime)
        session_id = f"{run_id}-session"
        store.create_run(run_id, workflow_name="bench", input={"task": "replicas"})
        store.bind_origin_session(run_id, session_id, execution_mode="interactive")
        store.record_progress(run_id, status="running", current_node="hold")
        latencies = []
        for number in range(samples):
            store.queue_follow_up(
                run_id,
                request_id=f"request-{number}",
                target_session_id=session_id,
                actor=Actor("session", session_id),
                source="pi-session",
                prompt=f"Follow-up {number}",
            )
            started = time.perf_counter()
            queue = store.follow_up_queue(run_id)
            latencies.append((time.perf_counter() - started) * 1000)
            if queue is None or len(queue.follow_ups) != number + 1:
                raise RuntimeError("a query did not see the command just made")
        storage = runtime.storage
        replicas = storage.replicas if isinstance(storage, PostgresStorage) else None
        return latencies, ReplicaStats() if replicas is None else replicas.stats


def replica_reads(bench: Bench) -> BenchResult | None:
    """X2: p99 of a query after a command, from a replica (wait included) vs the primary."""
    if bench.backend != "postgresql":
        return None
    settings = read_postgres_url(bench.scratch.url)
    if not settings.replica_url:
        return None
    primary = bench.scratch.new_url()
    database = urlsplit(primary).path
    replicas = [_on_database(url, database) for url in settings.replica_url]
    for replica in replicas:
        _await_database(replica)
    separator = "&" if urlsplit(primary).query else "?"
    replicated = (
        primary
        + separator
        + "&".join(f"replica_url={quote(replica, safe='')}" for replica in replicas)
        + f"&replica_wait={settings.replica_wait:g}"
    )
    on_primary, _ = _latencies(primary, bench.samples, "on-primary")
    on_replica, went = _latencies(replicated, bench.samples, "on-replica")
    p99, baseline = percentile(on_replica, 0.99), percentile(on_primary, 0.99)
    goal_ms = baseline + settings.replica_wait * 1000
    shown = ", ".join(redact_url(replica) for replica in settings.replica_url)
    return BenchResult(
        "X2",
        f"follow_up_queue right after queue_follow_up, p99, from {shown} "
        f"({went.replica}/{len(on_replica)} answered there, {went.waited} after a wait; p50 "
        f"{percentile(on_replica, 0.5):.1f} ms) vs the primary alone "
        f"(p50 {percentile(on_primary, 0.5):.1f} ms)",
        p99,
        "ms",
        baseline,
        p99 / baseline,
        f"p99 <= the primary's + replica_wait ({settings.replica_wait * 1000:g} ms)",
        p99 <= goal_ms,
    )
