"""Bench row X1 (commands through a transaction pooler vs directly): measured when the bench
URL goes through a pooler and names the server as its listen_url, absent otherwise."""

from __future__ import annotations

import json
from pathlib import Path
from urllib.parse import quote

import pytest

from tests.support.cli import bench
from tests.support.clusters import PASSWORD, PgBouncer

pytestmark = [pytest.mark.postgres, pytest.mark.pgbouncer]
ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_x1_measures_commands_through_the_pooler_and_directly(pgbouncer: PgBouncer) -> None:
    direct = quote(pgbouncer.server.url("postgres"), safe="")
    url = pgbouncer.url("postgres", query=f"pooler=transaction&listen_url={direct}")

    finished = bench(url, ROOT, "X1", "P11")

    assert finished.returncode == 0, finished.stderr
    rows = {row["id"]: row for row in json.loads(finished.stdout)["results"]}
    assert set(rows) == {"X1", "P11"}
    x1 = rows["X1"]
    assert x1["unit"] == "commands/s"
    assert x1["value"] > 0
    assert x1["baselines"]["direct"] > 0
    assert x1["baselines"]["p2_pooled"] > 0
    assert x1["baselines"]["p2_direct"] > 0
    assert PASSWORD not in finished.stdout + finished.stderr


def test_x1_is_absent_without_a_pooler(pgbouncer: PgBouncer) -> None:
    finished = bench(pgbouncer.server.url("postgres"), ROOT, "X1")

    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout)["results"] == []
