"""Blue/green rebuilds on a SQLite file and PostgreSQL, with real processes.

A rebuild builds beside the live version while commands keep flowing, switches once its rows
match, and only one build of a projection runs at a time (a second ``runledger projections
rebuild`` is refused while the first holds the lock). A build killed half-way (``kill -9``)
leaves queries on the old version, and the next rebuild resumes it (or ``--restart`` starts
afresh). A new version reports its row-level differences and switches only when accepted.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from runledger.domain.records import ProjectionStatus
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store
from runledger.projections.base import ProjectedEvent, ViewWriter
from runledger.projections.terminal_data import TerminalDataProjection
from tests.integration.test_read_model_rebuild import execute_sql
from tests.support.scenario import RUN, queued_id, running_run

REPO_ROOT = Path(__file__).resolve().parents[2]
NAME = "terminal_data"
EVENTS = 4_000
"""Enough for a build of several pages (a page is at most 1000 events)."""
WAIT_SECONDS = 60.0


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"
    return env


def runledger(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "runledger.infrastructure.cli", *args],
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@dataclass
class PausedBuild:
    """A rebuild process stopped after its first page (``tests.support.paused_build``)."""

    process: subprocess.Popen[str]
    go: Path

    def resume(self) -> tuple[int, str]:
        self.go.touch()
        out, _ = self.process.communicate(timeout=120)
        return self.process.returncode, out

    def kill(self) -> None:
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=30)


def start_paused_build(url: str, folder: Path, name: str = NAME) -> PausedBuild:
    ready, go = folder / "ready", folder / "go"
    ready.unlink(missing_ok=True)
    go.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.support.paused_build", url, name, str(ready), str(go)],
        env=environment(),
        cwd=REPO_ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    deadline = time.monotonic() + WAIT_SECONDS
    while not ready.exists():
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            out, _ = process.communicate()
            pytest.fail(f"the paused build never paused:\n{out}")
        time.sleep(0.01)
    return PausedBuild(process, go)


@pytest.fixture
def history(durable_url: str) -> str:
    """A store with a generated history, every read model caught up; its URL."""
    with open_runtime(durable_url) as runtime:
        for batch in HistoryGenerator(seed=5, prefix="bg").batches(EVENTS, follow_ups_per_run=8):
            runtime.storage.events.insert_events(batch)
        runtime.catch_up()
    return durable_url


def status_of(url: str, name: str = NAME) -> ProjectionStatus:
    with open_store(url, embedded_projections=False) as store:
        [status] = [s for s in store.projection_status() if s.name == name]
    return status


def answers(url: str) -> tuple[Any, ...]:
    with open_store(url, embedded_projections=False) as store:
        return (
            store.terminal_data("bg-run-1"),
            store.terminal_data("bg-run-7"),
            store.read_model_digest(NAME),
        )


# -- one build at a time ----------------------------------------------------------------------


def test_a_second_rebuild_is_refused_while_one_holds_the_lock(history: str, tmp_path: Path) -> None:
    first = start_paused_build(history, tmp_path)
    try:
        second = runledger("projections", "rebuild", NAME, "--url", history)
    finally:
        code, out = first.resume()

    assert second.returncode == 3, second  # retryable: the lock's holder will finish
    assert "[projection.build-locked]" in " ".join(second.stderr.split()), second
    assert (code, "switched=True" in out) == (0, True), out


def test_after_a_refused_rebuild_the_first_one_still_switches(history: str, tmp_path: Path) -> None:
    first = start_paused_build(history, tmp_path)
    runledger("projections", "rebuild", NAME, "--url", history)
    first.resume()

    status = status_of(history)

    assert (status.active_version, status.building_version, status.lag) == (
        TerminalDataProjection.version,
        None,
        0,
    )


def test_rebuilds_of_two_projections_run_at_once(history: str, tmp_path: Path) -> None:
    first = start_paused_build(history, tmp_path)
    try:
        other = runledger("projections", "rebuild", "runs", "--url", history)
    finally:
        first.resume()

    assert other.returncode == 0, other


# -- a build killed half-way ------------------------------------------------------------------


def test_a_killed_build_leaves_queries_answering_from_the_old_version(
    history: str, tmp_path: Path
) -> None:
    before = answers(history)
    start_paused_build(history, tmp_path).kill()

    assert answers(history) == before


def test_a_killed_build_shows_as_building_part_way(history: str, tmp_path: Path) -> None:
    start_paused_build(history, tmp_path).kill()

    status = status_of(history)

    assert status.building_version == TerminalDataProjection.version
    assert status.building_position is not None
    assert 0 < status.building_position < status.position


@pytest.mark.slow
def test_the_next_rebuild_resumes_a_killed_build_and_switches(history: str, tmp_path: Path) -> None:
    before = answers(history)
    start_paused_build(history, tmp_path).kill()
    with open_runtime(history, embedded_projections=False) as runtime:
        killed = runtime.views.registry(NAME).building
    assert killed is not None

    resumed = runledger("projections", "rebuild", NAME, "--json", "--url", history)

    assert resumed.returncode == 0, resumed
    assert f'"slot": {killed.slot}' in resumed.stdout, "the killed build's slot is resumed"
    assert answers(history) == before
    assert status_of(history).building_version is None


@pytest.mark.slow
def test_a_restart_starts_a_killed_build_afresh(history: str, tmp_path: Path) -> None:
    start_paused_build(history, tmp_path).kill()
    with open_runtime(history, embedded_projections=False) as runtime:
        killed = runtime.views.registry(NAME).building
    assert killed is not None

    restarted = runledger("projections", "rebuild", NAME, "--restart", "--json", "--url", history)

    assert restarted.returncode == 0, restarted
    assert f'"slot": {killed.slot + 1}' in restarted.stdout
    verified = runledger("projections", "verify", NAME, "--url", history)
    assert verified.returncode == 0, verified


# -- commands keep flowing --------------------------------------------------------------------


def test_commands_during_a_build_are_answered_at_once_and_land_in_the_new_version(
    history: str, tmp_path: Path
) -> None:
    build = start_paused_build(history, tmp_path)
    try:
        with open_store(history) as host:
            running_run(host)
            queued_id(host)
            host.finish_run(RUN, status="failed", error="boom")
            during = host.terminal_data(RUN)
    finally:
        code, out = build.resume()
    assert code == 0, out
    assert during is not None

    with open_store(history) as host:
        after = host.terminal_data(RUN)
        status = next(s for s in host.projection_status() if s.name == NAME)

    assert after == during
    assert (status.building_version, status.lag) == (None, 0)


def test_an_embedded_host_follows_the_switch_and_keeps_projecting(
    history: str, tmp_path: Path
) -> None:
    with open_runtime(history) as runtime:
        host = WorkflowStore(runtime)
        running_run(host)
        old_slot = runtime.views.registry(NAME).active
        start_paused_build(history, tmp_path).resume()
        host.finish_run(RUN, status="completed", final_output={"ok": True})

        read = host.terminal_data(RUN)
        new_slot = runtime.projector.runner(NAME).slot

    assert read is not None
    assert read.status == "completed"
    assert old_slot is not None
    assert new_slot is not None
    assert new_slot.slot != old_slot.slot


def test_after_drop_old_a_host_still_reading_the_old_slot_reads_the_new_one(
    history: str,
) -> None:
    with open_runtime(history, embedded_projections=False) as runtime:
        host = WorkflowStore(runtime)
        before = host.terminal_data("bg-run-1")
        rebuilt = runledger("projections", "rebuild", NAME, "--drop-old", "--url", history)
        assert rebuilt.returncode == 0, rebuilt

        after = host.terminal_data("bg-run-1")

    assert after == before


def test_after_drop_old_a_host_reads_a_queue_page_from_the_new_slot(history: str) -> None:
    # A queue's page reads the run's row, then its follow-ups: both from the slot active
    # now, once another process dropped the one the host knew.
    with open_runtime(history, embedded_projections=False) as runtime:
        host = WorkflowStore(runtime)
        run_id = next(
            run.run_id for run in host.list_runs().runs if host.follow_up_queue(run.run_id)
        )
        before = host.follow_up_queue_range(run_id, start=2, limit=3)
        rebuilt = runledger(
            "projections", "rebuild", "follow_up_queue", "--drop-old", "--url", history
        )
        assert rebuilt.returncode == 0, rebuilt

        after = host.follow_up_queue_range(run_id, start=2, limit=3)

    assert before is not None
    assert len(before.follow_ups) == 3
    assert after == before


# -- the compare step -------------------------------------------------------------------------


def test_a_rebuild_that_differs_from_the_live_rows_names_them_and_does_not_switch(
    history: str,
) -> None:
    slot = status_of(history)
    spoil(history, "bg-run-1")

    outcome = runledger("projections", "rebuild", NAME, "--url", history)

    assert outcome.returncode == 1, outcome
    text = " ".join(outcome.stdout.split())
    assert "DIFFERS from the live version" in text, outcome
    assert 'rl_td_runs ["bg-run-1"]' in text, outcome
    assert status_of(history).building_version == slot.version


def test_a_differing_rebuild_switches_with_accept(history: str) -> None:
    spoil(history, "bg-run-1")
    runledger("projections", "rebuild", NAME, "--url", history)

    accepted = runledger("projections", "rebuild", NAME, "--accept", "--url", history)

    assert accepted.returncode == 0, accepted
    assert runledger("projections", "verify", NAME, "--url", history).returncode == 0


def spoil(url: str, run_id: str) -> None:
    with open_runtime(url, embedded_projections=False) as runtime:
        active = runtime.views.registry(NAME).active
        assert active is not None
        physical = runtime.views.physical_name("rl_td_runs", active)
    execute_sql(url, f"UPDATE {physical} SET error = 'spoiled' WHERE run_id = '{run_id}'")


def changed_terminal_data(monkeypatch: pytest.MonkeyPatch) -> None:
    """Version 2 of terminal data: every error is reported in capitals."""
    monkeypatch.setattr(TerminalDataProjection, "version", TerminalDataProjection.version + 1)
    apply = TerminalDataProjection.apply

    def shouting(self: TerminalDataProjection, event: ProjectedEvent, view: ViewWriter) -> None:
        if event.wire_name == "run.finished" and event.get("error"):
            event = ProjectedEvent(
                event.position,
                event.wire_name,
                event.aggregate_id,
                event.version,
                {**event.data, "error": str(event["error"]).upper()},
            )
        apply(self, event, view)

    monkeypatch.setattr(TerminalDataProjection, "apply", shouting)


def test_a_new_version_reports_its_changed_rows_and_waits_for_accept(
    history: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    changed_terminal_data(monkeypatch)
    with open_runtime(history, embedded_projections=False) as runtime:
        [outcome] = runtime.rebuild_blue_green([NAME])
        active = runtime.views.registry(NAME).active
        assert active is not None
        rows = runtime.views.raw_rows("rl_td_runs", active) or []
        failed_runs = len([row for row in rows if row["error"]])

    assert (outcome.compared, outcome.switched, outcome.active_version) == (
        "summary",
        False,
        TerminalDataProjection.version - 1,
    )
    assert [(d.table, d.added, d.removed, d.changed) for d in outcome.tables] == [
        ("rl_td_runs", 0, 0, failed_runs)
    ]


def test_a_new_version_switches_on_accept(history: str, monkeypatch: pytest.MonkeyPatch) -> None:
    changed_terminal_data(monkeypatch)
    with open_runtime(history, embedded_projections=False) as runtime:
        runtime.rebuild_blue_green([NAME])
        [outcome] = runtime.rebuild_blue_green([NAME], accept=True)
        store = WorkflowStore(runtime)
        failed = [
            data
            for run in range(1, 20)
            if (data := store.terminal_data(f"bg-run-{run}")) is not None and data.error
        ]

    assert outcome.switched
    assert failed
    assert all(data.error == str(data.error).upper() for data in failed)
