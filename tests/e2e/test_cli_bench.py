"""`runledger bench --json` prints exactly one object with one row per measurement."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROW_KEYS = {"id", "name", "value", "unit", "baseline", "ratio", "goal", "met"}


def bench(url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    environment = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "runledger.infrastructure.cli",
            "bench",
            "--url",
            url,
            "--json",
            "--quick",
            "--events",
            "3000",
            "--seconds",
            "0.5",
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=600,
        check=False,
    )


def check_document(stdout: str, backend: str, ids: list[str]) -> None:
    document = json.loads(stdout)  # exactly one JSON document, nothing else on stdout
    assert set(document) == {"backend", "results"}
    assert document["backend"] == backend
    assert [row["id"] for row in document["results"]] == ids
    for row in document["results"]:
        assert set(row) == ROW_KEYS
        assert isinstance(row["value"], float | int)
        assert math.isfinite(row["value"])
        assert isinstance(row["met"], bool)
        if row["baseline"] is None:
            assert row["ratio"] is None
        else:
            assert row["ratio"] == pytest.approx(row["value"] / row["baseline"])


@pytest.mark.slow
def test_bench_on_sqlite_reports_p1_and_p3_to_p11(tmp_path: Path) -> None:
    outcome = bench(f"sqlite:///{tmp_path / 'bench.db'}", tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    check_document(
        outcome.stdout, "sqlite", ["P1", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11"]
    )
    assert not (tmp_path / "bench.db").exists(), "the bench must work in scratch databases"


@pytest.mark.slow
@pytest.mark.postgres
def test_bench_on_postgresql_reports_p1_to_p11(tmp_path: Path, postgres_url: str) -> None:
    outcome = bench(postgres_url, tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    check_document(
        outcome.stdout,
        "postgresql",
        ["P1", "P2", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11"],
    )
