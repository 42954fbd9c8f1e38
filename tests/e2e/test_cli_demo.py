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
TEST_FAILURE = "3 of 120 tests failed (test_refunds.py)"
READ_MODEL_HEADINGS = [
    "Read model: follow-up queues",
    "Read model: terminal data",
    "Read model: viewer deltas of",
    "Read model: session outbox of",
    "Projection status",
]
# A numbered section rule as Rich prints it: "10. Read model: terminal data ─────".
_HEADING = re.compile(r"^\d+\. (.+?) ─+\s*$", re.MULTILINE)
_OUTBOX_ROW = re.compile(
    r"^\s*(\d+)\s+(followUp|terminal|step|decision|notification)\s+(\w+)\s", re.MULTILINE
)


@dataclass(frozen=True)
class Outcome:
    returncode: int
    stdout: str
    stderr: str

    @property
    def text(self) -> str:
        """The output with line wrapping undone, so wrapped sentences still match."""
        return " ".join(self.stdout.split())

    def section(self, heading: str) -> str:
        """The output of the one section whose heading starts with ``heading``."""
        parts = _HEADING.split(self.stdout)
        # split() alternates: preamble, heading 1, body 1, heading 2, body 2, ...
        bodies = [
            body
            for title, body in zip(parts[1::2], parts[2::2], strict=True)
            if title.startswith(heading)
        ]
        assert len(bodies) == 1, (heading, self.stdout)
        return bodies[0]

    def section_text(self, heading: str) -> str:
        """A section with line wrapping undone."""
        return " ".join(self.section(heading).split())

    @property
    def logged_run(self) -> str:
        match = re.search(r"Event log of (\S+)", self.stdout)
        assert match is not None, self.stdout
        return match.group(1)


def run_demo(url: str, cwd: Path, *, columns: int = 80) -> Outcome:
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    # Rich sizes tables to COLUMNS when stdout is no terminal; pin it so layouts are known.
    env["COLUMNS"] = str(columns)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    completed = subprocess.run(
        [sys.executable, "-m", "runledger.infrastructure.cli", "demo", "--url", url],
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
        "settings.scope-moved",
        "session.segment-created",
        "session.entry-appended",
        "session.events-appended",
        "session.capture-updated",
        "effect.reserved",
        "effect.settled",
    ],
)
def test_demo_event_log_shows_the_key_events(first_demo: Outcome, wire_name: str) -> None:
    log = first_demo.section("Event log of")
    assert re.search(rf"\s{re.escape(wire_name)}\s", log)


def test_demo_prints_the_real_rejection_of_a_foreign_session(first_demo: Outcome) -> None:
    assert "Workflow follow-ups must target the run's origin Pi session" in first_demo.text


def test_demo_prints_the_real_rejection_of_a_session_settings_change(
    first_demo: Outcome,
) -> None:
    assert (
        'Workflow settings replace is not allowed at "/strictness" for actor session'
        in first_demo.text
    )


def test_demo_shows_the_settings_scope_handed_over_to_the_continuation(
    first_demo: Outcome,
) -> None:
    story = first_demo.section_text("A continuation child")

    assert "moved here with the run: change 1" in story


def test_demo_continues_the_run_through_an_answered_human_decision(first_demo: Outcome) -> None:
    story = first_demo.section_text("A continuation child")

    assert "pending: Approve the review plan? (approve or revise)" in story
    assert "answered approve with continue_run: won, decision accepted" in story
    assert re.search(
        r"continuation child continuation-\S+ \(queued\): continuation of review-", story
    )
    assert first_demo.logged_run.startswith("continuation-")


def test_demo_records_a_complete_session_of_the_child(first_demo: Outcome) -> None:
    story = first_demo.section_text("The child records its Pi session")

    assert "of attempt test-1: recording" in story
    assert "entry 1 recorded" in story
    assert "a batch of 2 events, then the capture is complete: 1 entry, 2 events" in story
    assert "integrity valid" in story


def test_demo_reserves_and_settles_a_managed_effect(first_demo: Outcome) -> None:
    story = first_demo.section_text("The child applies a managed effect")

    assert "new, attempt 1 applying, may apply: True" in story
    assert 'settled attempt 1: applied, {"state":"pending"}' in story


def test_demo_prints_the_real_rejection_of_removing_a_sent_follow_up(
    first_demo: Outcome,
) -> None:
    assert "A sent workflow follow-up cannot be removed" in first_demo.text


def test_demo_holds_the_restarts_follow_up_while_the_root_run_waits(
    first_demo: Outcome,
) -> None:
    story = first_demo.section_text("The root run closes")

    held, released = story.split("ended completed", 1)
    assert "none eligible" in held
    assert "is still waiting" in held
    assert re.search(r"next deliverable for \S+: followUp message", released)


@pytest.mark.parametrize("heading", READ_MODEL_HEADINGS)
def test_demo_prints_a_section_per_read_model_after_the_event_log(
    first_demo: Outcome, heading: str
) -> None:
    first_demo.section(heading)

    assert first_demo.stdout.index(heading) > first_demo.stdout.index("Event log of")


@pytest.mark.parametrize(
    ("state", "delivery"),
    [
        ("queued", "sent"),
        ("queued", "pending"),
        ("cancelled", "cancelled"),
        ("removed", "cancelled"),
    ],
)
def test_demo_follow_up_queue_shows_each_follow_ups_delivery(
    first_demo: Outcome, state: str, delivery: str
) -> None:
    queues = first_demo.section("Read model: follow-up queues")

    assert re.search(rf"\s{state}\s+{delivery}\s", queues)


def test_demo_terminal_data_shows_the_failed_runs_error(first_demo: Outcome) -> None:
    terminal = first_demo.section_text("Read model: terminal data")

    assert "status failed status_detail null" in terminal
    assert f"error {TEST_FAILURE}" in terminal
    assert "restart_number 1" in terminal


def test_demo_viewer_deltas_show_the_snapshot_cursor_rule(first_demo: Outcome) -> None:
    viewer = first_demo.section_text("Read model: viewer deltas of")

    assert "viewer_deltas(after_revision=0) -> snapshot_required" in viewer
    # The decision's continuation child is created bound to the parent's session: revision 2
    # is that binding (a graph revision), revision 3 the settings hand-over from the parent
    # (an inspector revision, settings before follow-ups, decision 24).
    assert re.search(r"\b2 graph \d+ /presentationRevision, /graphRevision", viewer)
    assert re.search(r"\b3 inspector/settings \d+ /presentationRevision, /settingsScopes", viewer)
    assert "inspector/follow-ups" in viewer


def test_demo_viewer_deltas_show_the_recorded_sessions_targets(first_demo: Outcome) -> None:
    viewer = first_demo.section_text("Read model: viewer deltas of")

    # The binding's graph delta is the revision prefix and the one ``add /session``.
    assert re.search(r"\bgraph 3 /presentationRevision, /graphRevision\b", viewer)
    for target in ("conversation/entries:tail", "timeline/session:tail", "conversation/capture"):
        assert target in viewer


def test_demo_outbox_lists_the_sessions_messages_from_order_one(first_demo: Outcome) -> None:
    rows = _OUTBOX_ROW.findall(first_demo.section("Read model: session outbox of"))

    orders = [int(order) for order, _kind, _status in rows]
    assert orders == list(range(1, len(rows) + 1))
    assert {"sent", "cancelled", "pending"} <= {status for _order, _kind, status in rows}


def test_demo_reports_the_next_deliverable_message(first_demo: Outcome) -> None:
    outbox = first_demo.section("Read model: session outbox of")

    reported = re.search(
        r"next deliverable: followUp message workflow-message-([0-9a-f]{8})", outbox
    )
    marked = re.search(r"(\d+)\s+followUp\s+pending\s+-\s+([0-9a-f]{8})\s+<- next", outbox)
    assert reported is not None, outbox
    assert marked is not None, outbox
    assert marked.group(2) == reported.group(1)
    assert f"session order {marked.group(1)}" in " ".join(outbox.split())


def test_demo_reports_every_projection_caught_up(first_demo: Outcome) -> None:
    status = first_demo.section("Projection status")

    # name, version, position, lag, active version (no build running, no error)
    rows = re.findall(r"^\s*(\w+)\s+\d+\s+\d+\s+(\d+)\s+v\d+\s*$", status, re.MULTILINE)
    assert {name for name, _lag in rows} == {
        "follow_up_queue",
        "terminal_data",
        "viewer_deltas",
        "session_outbox",
        "settings",
        "runs",
    }
    assert {lag for _name, lag in rows} == {"0"}


def test_demo_on_a_wide_console_shows_full_short_ids(tmp_path: Path) -> None:
    outcome = run_demo("memory://", tmp_path, columns=120)

    assert outcome.returncode == 0, outcome.stderr
    queues = outcome.section("Read model: follow-up queues")
    assert re.search(r"follow-up-[0-9a-f]{8}\s+controller:ci-bot\s+ci\s+queued\s+pending", queues)
    outbox = outcome.section("Read model: session outbox of")
    assert re.search(r"workflow-message-[0-9a-f]{8}\s+<- next", outbox)


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


@pytest.mark.postgres
def test_demo_runs_on_postgresql(postgres_store_url: str, tmp_path: Path) -> None:
    outcome = run_demo(postgres_store_url, tmp_path)

    assert outcome.returncode == 0, outcome.stderr
    assert "next deliverable: followUp message" in outcome.section_text(
        "Read model: session outbox of"
    )


def test_demo_reports_an_unsupported_url_as_bad_input(tmp_path: Path) -> None:
    outcome = run_demo("nosuchdb://here", tmp_path)

    assert outcome.returncode == 2
    assert outcome.stderr.startswith("error [store.invalid-url]: Unsupported store URL")
