"""``runledger audit`` as an auditor runs it: the real CLI in a subprocess, on a SQLite file."""

from __future__ import annotations

import hashlib
import sqlite3
from dataclasses import dataclass
from pathlib import Path

import pytest

from runledger.infrastructure import open_store
from runledger.infrastructure.runtime import open_runtime
from tests.support.audit import play_demo, read_lines, write_lines
from tests.support.cli import runledger
from tests.support.clock import FakeClock

REPO_ROOT = Path(__file__).resolve().parents[2]
TRAIL_KEYS = {"run_id", "lineage", "as_of", "runs", "entries"}
ENTRY_KEYS = {
    "position",
    "recorded_at",
    "wire_name",
    "run_id",
    "aggregate_id",
    "version",
    "actor",
    "summary",
}
VERDICT_KEYS = {"run_id", "ok", "runs", "events", "aggregates", "models", "difference"}
DIFFERENCE_KEYS = {"model", "table", "key", "expected", "stored"}
BUNDLE_VERDICT_KEYS = {
    "ok",
    "run_id",
    "events",
    "problem",
    "detail",
    "line",
    "aggregate_id",
    "version",
    "position",
    "model",
}


@dataclass(frozen=True)
class Demo:
    url: str
    path: Path
    failed_run: str
    review_run: str


@pytest.fixture
def demo(tmp_path: Path) -> Demo:
    path = tmp_path / "store.db"
    url = f"sqlite:///{path}"
    with open_store(url, clock=FakeClock()) as store:
        result = play_demo(store)
    return Demo(url, path, result.logged_run, result.ids.review_run)


def test_audit_prints_the_timeline_of_the_run(demo: Demo, tmp_path: Path) -> None:
    outcome = runledger("audit", demo.failed_run, "--url", demo.url, cwd=tmp_path)

    assert outcome.returncode == 0, outcome.stderr
    assert f"Audit of {demo.failed_run}" in outcome.stdout
    assert "run.finished" in outcome.stdout
    assert "finished failed, error 3 of 120 tests failed" in " ".join(outcome.stdout.split())


def test_audit_json_keys_are_stable(demo: Demo, tmp_path: Path) -> None:
    outcome = runledger(
        "audit", demo.failed_run, "--url", demo.url, "--lineage", "--json", cwd=tmp_path
    )

    document = outcome.json()
    assert outcome.returncode == 0
    assert set(document) == {"trail", "verification", "export"}
    assert set(document["trail"]) == TRAIL_KEYS
    assert set(document["trail"]["entries"][0]) == ENTRY_KEYS
    assert set(document["trail"]["entries"][0]["actor"]) == {"type", "id"}
    assert document["trail"]["runs"][0] == demo.review_run
    assert (document["verification"], document["export"]) == (None, None)


def test_audit_as_of_cuts_the_timeline(demo: Demo, tmp_path: Path) -> None:
    outcome = runledger(
        "audit", demo.failed_run, "--url", demo.url, "--as-of", "20", "--json", cwd=tmp_path
    )

    entries = outcome.json()["trail"]["entries"]
    assert entries
    assert max(entry["position"] for entry in entries) <= 20


def test_verify_exits_zero_on_an_intact_run(demo: Demo, tmp_path: Path) -> None:
    outcome = runledger("audit", demo.failed_run, "--url", demo.url, "--verify", cwd=tmp_path)

    assert outcome.returncode == 0, outcome.stderr
    assert f"verified {demo.failed_run}" in outcome.stdout


def test_verify_exits_one_and_names_a_tampered_row(demo: Demo, tmp_path: Path) -> None:
    with open_runtime(demo.url) as runtime:
        [table] = runtime.projector.runner("terminal_data").projection.tables
        # Behind the store's back, in the active slot's table (the logical name is a view).
        stored = runtime.views.physical_name(table, runtime.views.active_slot(table))
    with sqlite3.connect(demo.path) as connection:
        connection.execute(
            f"UPDATE \"{stored}\" SET error = 'nothing failed' WHERE run_id = ?",
            (demo.failed_run,),
        )

    outcome = runledger(
        "audit", demo.failed_run, "--url", demo.url, "--verify", "--json", cwd=tmp_path
    )

    assert outcome.returncode == 1
    verdict = outcome.json()["verification"]
    assert set(verdict) == VERDICT_KEYS
    assert set(verdict["difference"]) == DIFFERENCE_KEYS
    assert (verdict["difference"]["model"], verdict["difference"]["key"]) == (
        "terminal_data",
        [demo.failed_run],
    )
    assert verdict["difference"]["stored"]["error"] == "nothing failed"


def test_an_export_verifies_offline_without_any_database(demo: Demo, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.jsonl"
    exported = runledger(
        "audit",
        demo.failed_run,
        "--url",
        demo.url,
        "--lineage",
        "--export",
        str(bundle),
        cwd=tmp_path,
    )
    assert exported.returncode == 0, exported.stderr
    elsewhere = tmp_path / "auditor"
    elsewhere.mkdir()

    checked = runledger("audit", "verify-bundle", str(bundle), "--json", cwd=elsewhere)

    assert checked.returncode == 0, checked.stderr
    verdict = checked.json()
    assert set(verdict) == BUNDLE_VERDICT_KEYS
    assert (verdict["ok"], verdict["run_id"]) == (True, demo.failed_run)
    assert list(elsewhere.iterdir()) == [], "checking a bundle opened no store"


def test_a_tampered_bundle_is_refused_with_exit_one(demo: Demo, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.jsonl"
    runledger("audit", demo.failed_run, "--url", demo.url, "--export", str(bundle), cwd=tmp_path)
    lines = read_lines(bundle)
    lines[2]["event"]["state"]["actor"] = {"type": "human", "id": "mallory"}
    write_lines(bundle, lines)

    checked = runledger("audit", "verify-bundle", str(bundle), cwd=tmp_path)

    assert checked.returncode == 1
    assert "altered" in checked.stdout
    assert "line 3" in checked.stdout


def test_export_json_names_the_file_and_its_events(demo: Demo, tmp_path: Path) -> None:
    bundle = tmp_path / "bundle.jsonl"
    outcome = runledger(
        "audit",
        demo.failed_run,
        "--url",
        demo.url,
        "--export",
        str(bundle),
        "--json",
        cwd=tmp_path,
    )

    assert outcome.returncode == 0, outcome.stderr
    assert outcome.json()["export"] == {
        "path": str(bundle),
        "events": len(read_lines(bundle)) - 2,
        "lineage": False,
        "sha256": hashlib.sha256(bundle.read_bytes()).hexdigest(),
    }
    assert outcome.stderr == "", "no progress bar with --json"


@pytest.mark.parametrize(
    "args",
    [
        pytest.param(["audit", "no-such-run"], id="unknown-run"),
        pytest.param(["audit", "bad id!"], id="invalid-run-id"),
        pytest.param(["audit", "verify-bundle", "missing.jsonl"], id="missing-bundle"),
        pytest.param(["audit", "{run}", "--verify", "--as-of", "3"], id="as-of-with-verify"),
        pytest.param(["audit", "{run}", "--export", "no/such/folder/b.jsonl"], id="bad-path"),
    ],
)
def test_bad_input_exits_two(demo: Demo, tmp_path: Path, args: list[str]) -> None:
    filled = [arg.replace("{run}", demo.failed_run) for arg in args]
    if filled[1] != "verify-bundle":
        filled += ["--url", demo.url]

    outcome = runledger(*filled, cwd=tmp_path)

    assert outcome.returncode == 2, (outcome.stdout, outcome.stderr)
