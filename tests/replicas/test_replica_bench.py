"""Bench row X2 (a query after a command, from a replica with the read-your-writes wait,
against the primary alone): measured when the bench URL names a replica, absent otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

from tests.replicas.conftest import ReplicatedDatabase
from tests.support.cli import bench
from tests.support.postgres import PostgresServer

ROOT = Path(__file__).resolve().parents[2]


def test_x2_is_measured_from_the_replica_the_bench_url_names(
    replicated: ReplicatedDatabase,
) -> None:
    replica = quote(replicated.replica.url("postgres"), safe="")
    url = replicated.primary.url("postgres", query=f"replica_url={replica}")

    finished = bench(url, ROOT, "X2")

    assert finished.returncode == 0, finished.stderr
    [row] = json.loads(finished.stdout)["results"]
    assert row["id"] == "X2"
    assert row["unit"] == "ms"
    assert row["baselines"]["raw"] > 0
    # Every query after its command was answered by the replica, none by the primary.
    assert "30/30 answered there" in row["name"]
    assert "fault-test-secret" not in finished.stdout + finished.stderr


def test_x2_is_absent_without_a_replica(postgres_server: PostgresServer) -> None:
    finished = bench(postgres_server.admin_url, ROOT, "X2")

    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["results"] == []
