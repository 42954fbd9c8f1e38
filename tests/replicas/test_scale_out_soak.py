"""Many hosts at once (issue 23): eight host processes, each with its own store, share one
PostgreSQL for minutes of mixed commands while a projection worker is killed and restarted
every 30 s. Afterwards every acknowledged command is stored exactly once, every
read-your-writes check held, ``projections verify --all`` passes, and the read models' digests
are the same wherever they are read.

The deployment is the one the README describes for many hosts: a primary behind PgBouncer in
transaction mode (``pooler=transaction``), a streaming replica the hosts read from
(``replica_url=``), and a worker that hears commits through ``listen_url``. Half of the hosts
project their read models in-process; the other half leave them to the worker.
``RUNLEDGER_SOAK_SECONDS`` sets the length (default 300).
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.storage.postgres import PostgresStorage
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.replicas.conftest import ReplicatedDatabase
from tests.support.clusters import owned_scratch_folder, pooled
from tests.support.soak_hosts import SHARED_RUN, SHARED_SESSION, host_main, read_journals

pytestmark = [pytest.mark.slow, pytest.mark.postgres, pytest.mark.pgbouncer]

HOSTS = 8
WORKER_RESTART_SECONDS = 30.0


@dataclass(frozen=True)
class Deployment:
    """Where the hosts connect, and the server behind it."""

    host_url: str
    """The URL every host opens (through a pooler, with replicas, as deployed)."""
    worker_url: str
    """The projection worker's URL: through the pooler, listening on the primary itself."""
    primary_url: str
    """A direct URL of the primary, for the checks after the soak."""
    replicated: ReplicatedDatabase


def soak_seconds() -> float:
    return float(os.environ.get("RUNLEDGER_SOAK_SECONDS", "300"))


def _worker(url: str, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "runledger.infrastructure.cli", "projections", "run"]
    with log.open("ab") as output:
        return subprocess.Popen(
            [*command, "--url", url, "--poll", "0.2"], stdout=output, stderr=subprocess.STDOUT
        )


def run_soak(deployment: Deployment, folder: Path, seconds: float) -> dict[str, Any]:
    """Run the hosts and the killed-and-restarted worker for ``seconds``; their journals."""
    with open_store(deployment.primary_url) as store:
        store.create_run(SHARED_RUN, workflow_name="soak", input={})
        store.bind_origin_session(SHARED_RUN, SHARED_SESSION)
    context = multiprocessing.get_context("spawn")
    inboxes = [context.Queue() for _ in range(HOSTS)]
    deadline = time.time() + seconds
    hosts = [
        context.Process(
            target=host_main,
            args=(
                host,
                deployment.host_url,
                str(folder / f"host-{host}.jsonl"),
                deadline,
                host % 2 == 0,
                inboxes[host],
                inboxes[(host + 1) % HOSTS],
            ),
        )
        for host in range(HOSTS)
    ]
    for process in hosts:
        process.start()
    worker_log = folder / "worker.log"
    worker = _worker(deployment.worker_url, worker_log)
    kills = 0
    try:
        while time.time() < deadline:
            time.sleep(min(WORKER_RESTART_SECONDS, max(0.0, deadline - time.time())))
            if time.time() >= deadline:
                break
            worker.send_signal(signal.SIGKILL)
            worker.wait(timeout=30)
            kills += 1
            worker = _worker(deployment.worker_url, worker_log)
        for process in hosts:
            process.join(timeout=120)
    finally:
        for process in hosts:
            if process.is_alive():
                process.kill()
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
    return {"kills": kills, "exit_codes": [process.exitcode for process in hosts]}


def check_soak(deployment: Deployment, folder: Path) -> dict[str, int]:
    """Hold every journal against the stored history; the soak's counts."""
    lines = read_journals(folder)
    kinds = Counter(line["kind"] for line in lines)
    crashes = [line for line in lines if line["kind"] == "crash"]
    assert not crashes, crashes[0]["traceback"]
    assert kinds["done"] == HOSTS, kinds
    failed = [line for line in lines if line["kind"] == "check_failed"]
    assert not failed, failed[:5]
    refused = [line for line in lines if line["kind"] == "error" and not line["retryable"]]
    assert not refused, refused[:5]
    token_checks = [line for line in lines if line["kind"] == "token_check"]
    assert token_checks, "no token reached a neighbour"
    stale = [line for line in token_checks if not line["held"]]
    assert not stale, stale[:5]

    follow_ups = [line for line in lines if line["kind"] == "follow_up"]
    runs = {line["run_id"] for line in lines if line["kind"] == "run"}
    with open_store(deployment.primary_url, embedded_projections=False) as store:
        for line in follow_ups:
            follow_up = store.get_follow_up(line["follow_up_id"])
            assert follow_up is not None, line
            assert (follow_up.request_id, follow_up.order) == (line["request_id"], line["order"])
        for run_id in runs:
            assert store.get_run(run_id) is not None, run_id
        # Every other acknowledged write is there, once: a second copy of a change, a batch
        # or an attempt would show in these counts.
        for line in lines:
            if line["kind"] == "finished":
                run = store.get_run(line["run_id"])
                assert run is not None, line
                assert run.status == "completed", line
            elif line["kind"] == "settings":
                [scope] = store.settings_scopes(line["run_id"])
                assert scope.change_number == line["change_number"] == 1, line
                assert scope.settings == {"notes": [int(line["run_id"].rsplit("-r", 1)[1])]}
            elif line["kind"] == "session_events":
                [segment] = store.session_segments(line["run_id"])
                assert segment.event_count == line["count"], line
                assert segment.integrity == "valid", segment.diagnostics
            elif line["kind"] == "effect":
                effect = store.get_effect(line["effect_id"])
                assert effect is not None, line
                assert effect.status == "applied", line
                assert effect.attempt == 1, line
    with open_store(deployment.primary_url) as store:
        shared_queue = store.follow_up_queue(SHARED_RUN)
    assert shared_queue is not None
    stored = {item.request_id: item.order for item in shared_queue.follow_ups}
    acked = {
        line["request_id"]: line["order"] for line in follow_ups if line["run_id"] == SHARED_RUN
    }
    # The shared run's queue numbers every stored follow-up once, without a gap; each
    # acknowledged one is there with the order it was acknowledged with. A follow-up stored
    # but not acknowledged (its host lost the answer to a fault) is one of the retryable errors.
    assert sorted(stored.values()) == list(range(1, len(stored) + 1))
    assert len(stored) == len(shared_queue.follow_ups)
    assert acked.items() <= stored.items()
    assert len(stored) - len(acked) <= kinds["error"]
    verify = subprocess.run(
        [
            sys.executable,
            "-m",
            "runledger.infrastructure.cli",
            "projections",
            "verify",
            "--all",
            "--url",
            deployment.primary_url,
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert verify.returncode == 0, verify.stdout + verify.stderr
    with open_store(deployment.primary_url) as primary:
        names = primary.projection_names()
        on_primary = {name: primary.read_model_digest(name) for name in names}
    deployment.replicated.wait_for_replica()
    with open_runtime(deployment.replicated.url(replica_wait=30)) as runtime:
        on_replica = {name: WorkflowStore(runtime).read_model_digest(name) for name in names}
        storage = runtime.storage
        assert isinstance(storage, PostgresStorage)
        assert storage.replicas is not None
        assert storage.replicas.stats.replica == len(names)
    assert on_replica == on_primary
    return {
        "runs": len(runs),
        "follow_ups": len(follow_ups),
        "token_checks": len(token_checks),
        "retryable_errors": kinds["error"],
    }


@pytest.fixture
def deployment(replicated: ReplicatedDatabase) -> Iterator[Deployment]:
    """The replicated database behind a PgBouncer in transaction mode."""
    root = owned_scratch_folder("runledger-soak-")
    try:
        with pooled(replicated.primary, root, pool_size=16) as bouncer:
            replica = quote(replicated.replica.url(replicated.name), safe="")
            listen = quote(replicated.primary_url, safe="")
            through = bouncer.url(replicated.name)
            yield Deployment(
                host_url=f"{through}&replica_url={replica}&replica_wait=0.5",
                worker_url=f"{through}&listen_url={listen}",
                primary_url=replicated.primary_url,
                replicated=replicated,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_eight_hosts_through_a_pooler_with_a_replica_lose_nothing_for_minutes(
    deployment: Deployment, tmp_path: Path
) -> None:
    ran = run_soak(deployment, tmp_path, soak_seconds())

    assert ran["exit_codes"] == [0] * HOSTS
    assert ran["kills"] >= int(soak_seconds() // WORKER_RESTART_SECONDS) - 1
    counts = check_soak(deployment, tmp_path)
    # The soak's counts, for the closing note and the README (pytest -s shows them).
    print(f"\nsoak: {ran['kills']} worker kills, {counts}")
    assert counts["runs"] >= HOSTS
