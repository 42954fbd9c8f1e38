"""`runledger bench --json` prints exactly one object with one row per measurement; the
command rows carry their raw, ideal and library baselines with a ratio to each."""

from __future__ import annotations

import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from runledger.infrastructure.cli.bench.calibration import (
    ADDITIONS,
    COMMITS,
    GAP_SECONDS,
    WALK_OBJECTS,
)
from tests.support.cli import bench
from tests.support.postgres import PostgresServer

ROW_KEYS = {
    "id",
    "name",
    "value",
    "unit",
    "baseline",
    "ratio",
    "goal",
    "met",
    "baselines",
    "ratios",
    "seconds",
}
COMMAND_BASELINES = {"raw", "ideal", "library"}
BUILT_IN_ROWS = ["P1", "P2b", "P3", "P4", "P5", "P6", "P7", "P8", "P9", "P10", "P11", "P12"]
# extra_rows.EXTRA_ROWS: storage amplification, writer threads, the read models', the audit's,
# retention's, the server's and the instrumentation's rows, after the others.
EXTRA_ROWS = ["P13", "P2t", "V1", "V2", "V3", "A1", "A2", "R1", "R2", "S1", "S2", "O1"]
SQLITE_ROWS = [*BUILT_IN_ROWS, *EXTRA_ROWS]
POSTGRES_ROWS = ["P1", "P2", *SQLITE_ROWS[1:]]


def check_document(stdout: str, backend: str, ids: list[str]) -> dict[str, Any]:
    """The rows by id, once the document has exactly the promised shape."""
    document = json.loads(stdout)  # exactly one JSON document, nothing else on stdout
    assert set(document) == {"backend", "machine", "results"}
    assert document["backend"] == backend
    # The machine's speed before the first row and after the last, to read absolute rows by:
    # the processor's (a loop) and the database's (commits).
    machine = document["machine"]
    assert set(machine) == {
        *("additions", "start_seconds", "end_seconds"),
        *("walk_objects", "walk_start_seconds", "walk_end_seconds"),
        *("commits", "commit_start_seconds", "commit_end_seconds"),
        *("gap_ms", "spaced_commit_start_ms", "spaced_commit_end_ms"),
    }
    assert machine["additions"] == ADDITIONS
    assert machine["walk_objects"] == WALK_OBJECTS
    assert machine["commits"] == COMMITS
    assert machine["gap_ms"] == GAP_SECONDS * 1000
    for key in (
        *("start_seconds", "end_seconds", "walk_start_seconds", "walk_end_seconds"),
        *("commit_start_seconds", "commit_end_seconds"),
    ):
        assert 0 < machine[key] < 60
    for key in ("spaced_commit_start_ms", "spaced_commit_end_ms"):
        assert 0 < machine[key] < 60_000
    assert [row["id"] for row in document["results"]] == ids
    for row in document["results"]:
        assert set(row) == ROW_KEYS
        assert isinstance(row["value"], float | int)
        assert math.isfinite(row["value"])
        assert isinstance(row["met"], bool)
        # Where the bench's own time went: every row says how long it took.
        assert isinstance(row["seconds"], float)
        assert row["seconds"] >= 0
        assert set(row["ratios"]) == set(row["baselines"])
        for kind, baseline in row["baselines"].items():
            assert row["ratios"][kind] == pytest.approx(row["value"] / baseline)
        if row["baseline"] is None:
            assert row["ratio"] is None
        else:
            assert row["ratio"] == pytest.approx(row["value"] / row["baseline"])
            assert row["baseline"] in row["baselines"].values()
    return {row["id"]: row for row in document["results"]}


def check_command_rows(rows: dict[str, Any]) -> None:
    """P1, P2 and P2b carry the three baselines; P1 and P2 answer to the ideal, P2b to P1."""
    for row_id in {"P1", "P2", "P2b"} & set(rows):
        assert set(rows[row_id]["baselines"]) >= COMMAND_BASELINES, row_id
        assert all(value > 0 for value in rows[row_id]["baselines"].values()), row_id
    for row_id in {"P1", "P2"} & set(rows):
        assert rows[row_id]["baseline"] == rows[row_id]["baselines"]["ideal"]
    # P1 and P10 also answer to their baseline run with the command's processor time spent
    # before each commit (``cpu_gaps``), and say how much time that was.
    spaced = {"P1": "ideal_spaced", "P10": "raw_spaced"}
    for row_id in spaced.keys() & rows.keys():
        assert rows[row_id]["baselines"][spaced[row_id]] > 0, row_id
        assert re.search(
            r"[0-9.]+ x it with this command's [0-9.]+ ms of processor time spent before each "
            "commit",
            rows[row_id]["name"],
        ), rows[row_id]["name"]
    if "P2b" in rows:
        assert rows["P2b"]["baselines"]["p1"] == rows["P2b"]["baseline"]
        assert "0 errors" in rows["P2b"]["name"], rows["P2b"]["name"]
    for row_id in {"P6", "P8", "P9"} & set(rows):
        # A query from a store whose read model was built, and from one that projected it
        # live (embedded projections): the worse p99 is the row's.
        found = re.search(
            r"built p99 ([0-9.]+) ms; projected live p99 ([0-9.]+) ms", rows[row_id]["name"]
        )
        assert found, rows[row_id]["name"]
        assert rows[row_id]["value"] == pytest.approx(max(map(float, found.groups())), abs=0.01)
    if "P13" in rows:
        # Bytes on disk per payload byte, for the bench history and a recording-heavy one.
        assert rows["P13"]["baselines"].keys() == {"payload"}
        assert rows["P13"]["ratio"] > 0
        assert "bench history of 3,000 events" in rows["P13"]["name"]
        assert "640 session records" in rows["P13"]["name"]
    if "R1" in rows:
        # Trees pruned while a writer queued follow-ups, the database's size before and after.
        assert "settled trees" in rows["R1"]["name"]
        assert "follow-ups were queued (p99" in rows["R1"]["name"]
        assert rows["R1"]["unit"] == "MB"
    if "R2" in rows:
        # A restore answers to the export of the same tree, in turns with it.
        assert rows["R2"]["baselines"].keys() == {"export"}
        assert "vs its export (median of 3 turns: export, prune, restore)" in rows["R2"]["name"]
    if "V2" in rows:
        # A blue/green rebuild answers to a plain one, in turns with it.
        assert rows["V2"]["baselines"].keys() == {"plain"}
        assert "median of 3 turns, one of each" in rows["V2"]["name"]
    if "P2t" in rows:
        # Group commit answers to the same threads committing one by one, in the same run.
        assert set(rows["P2t"]["baselines"]) == {"ungrouped", "one thread"}
        assert rows["P2t"]["baseline"] == rows["P2t"]["baselines"]["ungrouped"]
        assert "commands per commit" in rows["P2t"]["name"]


@pytest.mark.slow
def test_bench_on_sqlite_reports_p1_p2b_and_p3_to_p12(tmp_path: Path) -> None:
    outcome = bench(f"sqlite:///{tmp_path / 'bench.db'}", tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    check_command_rows(check_document(outcome.stdout, "sqlite", SQLITE_ROWS))
    assert not (tmp_path / "bench.db").exists(), "the bench must work in scratch databases"


@pytest.mark.slow
@pytest.mark.postgres
def test_bench_on_postgresql_reports_p1_to_p12(tmp_path: Path, postgres_url: str) -> None:
    outcome = bench(postgres_url, tmp_path)
    assert outcome.returncode == 0, outcome.stderr
    check_command_rows(check_document(outcome.stdout, "postgresql", POSTGRES_ROWS))


WITH_CTRL_C = (
    "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "sys.argv[0] = 'runledger'; runpy.run_module('runledger.infrastructure.cli', "
    "run_name='__main__')"
)
"""The CLI as a terminal runs it, Ctrl-C raising ``KeyboardInterrupt``. A process started in
the background by a shell without job control (a CI script's ``… &``) inherits SIGINT
ignored, and Python then leaves it ignored: the bench went on measuring after SIGINT, and
this test waited for it in vain."""


@pytest.mark.postgres
@pytest.mark.parametrize(
    ("stop", "delay"),
    [(signal.SIGTERM, 0.0), (signal.SIGTERM, 0.3), (signal.SIGTERM, 1.5), (signal.SIGINT, 0.3)],
)
def test_a_bench_stopped_by_a_signal_says_so_and_drops_its_scratch_databases(
    tmp_path: Path,
    postgres_url: str,
    postgres_server: PostgresServer,
    stop: signal.Signals,
    delay: float,
) -> None:
    environment = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    process = subprocess.Popen(
        [
            # ``faulthandler``: a bench that does not stop is made to say where it hangs.
            *(sys.executable, "-X", "faulthandler", "-c", WITH_CTRL_C),
            *("bench", "--url", postgres_url, "--only", "P1", "--seconds", "60"),
        ],
        cwd=tmp_path,
        env=environment,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    pattern = f"runledger\\_bench\\_{process.pid}\\_%"

    def scratch_databases() -> list[str]:
        rows = postgres_server.connection.execute(
            "SELECT datname FROM pg_database WHERE datname LIKE %s", (pattern,)
        ).fetchall()
        return [str(name) for (name,) in rows]

    try:
        deadline = time.monotonic() + 60
        while not scratch_databases():
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the bench made no scratch database"
            time.sleep(0.05)
        # Anywhere from the database's creation into the measurement, where a store holds
        # connections to it.
        time.sleep(delay)
        process.send_signal(stop)
        try:
            _, stderr = process.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGABRT)
            _, stderr = process.communicate(timeout=30)
            pytest.fail(f"the bench did not stop within 60 s of {stop.name}:\n{stderr}")
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        for name in scratch_databases():
            postgres_server.drop_database(name)

    assert process.returncode == 130, stderr
    assert "error [interrupted]: stopped before it finished\n" in stderr, repr(stderr)
    assert scratch_databases() == []
