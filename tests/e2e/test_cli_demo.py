"""``runledger demo`` as a user runs it: the real module in a subprocess, on a real store."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """The output with line wrapping undone, so wrapped sentences still match."""
        return " ".join(self.stdout.split())

    @property
    def logged_run(self) -> str:
        match = re.search(r"Event log of (\S+)", self.stdout)
        assert match is not None, self.stdout
        return match.group(1)


def run_demo(url: str, cwd: Path) -> Outcome:
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-m", "infrastructure.cli", "demo", "--url", url],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return Outcome(completed.returncode, completed.stdout, completed.stderr)


@pytest.fixture(scope="module")
def sqlite_url(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('demo') / 'demo.db'}"


@pytest.fixture(scope="module")
def first_demo(sqlite_url: str, tmp_path_factory: pytest.TempPathFactory) -> Outcome:
    return run_demo(sqlite_url, tmp_path_factory.mktemp("cwd"))


def test_demo_exits_with_status_zero(first_demo: Outcome) -> None:
    assert first_demo.returncode == 0, first_demo.stderr


@pytest.mark.parametrize(
    "wire_name",
    [
        "run.created",
        "follow-up.queued",
        "follow-up.cancelled",
        "workflow-message.sent",
        "workflow-turn.ended",
        "run.restart-child-created",
    ],
)
def test_demo_event_log_shows_the_key_events(first_demo: Outcome, wire_name: str) -> None:
    log = first_demo.stdout.split("Event log of", 1)[-1]
    assert re.search(rf"\s{re.escape(wire_name)}\s", log)


def test_demo_prints_the_real_rejection_of_a_foreign_session(first_demo: Outcome) -> None:
    assert "Workflow follow-ups must target the run's origin Pi session" in first_demo.text


def test_demo_prints_the_real_rejection_of_removing_a_sent_follow_up(
    first_demo: Outcome,
) -> None:
    assert "A sent workflow follow-up cannot be removed" in first_demo.text


def test_demo_runs_again_against_the_same_file(
    first_demo: Outcome, sqlite_url: str, tmp_path: Path
) -> None:
    second = run_demo(sqlite_url, tmp_path)

    assert second.returncode == 0, second.stderr
    assert second.logged_run != first_demo.logged_run


def test_demo_runs_on_a_memory_store(tmp_path: Path) -> None:
    outcome = run_demo("memory://", tmp_path)

    assert outcome.returncode == 0, outcome.stderr
    assert "run.restart-child-created" in outcome.stdout


def test_demo_reports_an_unsupported_url_with_status_one(tmp_path: Path) -> None:
    outcome = run_demo("nosuchdb://here", tmp_path)

    assert outcome.returncode == 1
    assert "Unsupported store URL" in outcome.stderr
