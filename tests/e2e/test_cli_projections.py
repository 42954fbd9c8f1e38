"""``runledger projections status|rebuild`` as an operator runs them: the real module in a
subprocess, on a SQLite file (and ``memory://`` for status)."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path

import pytest

from runledger.domain.ids import follow_up_message_id
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.cli import runledger

REPO_ROOT = Path(__file__).resolve().parents[2]
NAMES = ["follow_up_queue", "runs", "session_outbox", "settings", "terminal_data", "viewer_deltas"]
SESSION = "session-1"
STATUS_KEYS = {
    "name",
    "version",
    "position",
    "lag",
    "active_version",
    "building_version",
    "building_position",
    "last_error",
}
"""The keys of each object of ``projections status --json`` (README, "Projections")."""


def play(store: WorkflowStore) -> None:
    """A run with three follow-ups (one delivered), then failed: about twenty events."""
    store.create_run("run-1", workflow_name="echo", input={"task": "reply"})
    store.bind_origin_session("run-1", SESSION)
    store.record_progress("run-1", status="running", current_node="hold")
    ids = [
        store.queue_follow_up(
            "run-1",
            request_id=f"request-{number}",
            target_session_id=SESSION,
            actor=Actor("session", SESSION),
            source="workflow-tool",
            prompt=f"Task {number}",
        ).follow_up.follow_up_id
        for number in range(3)
    ]
    message_id = follow_up_message_id(ids[0])
    store.report_branch(SESSION, [(message_id, "entry-1")], allowed_ids=[message_id])
    store.finish_run("run-1", status="failed", error="boom")


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    """A SQLite store with a short history, every projection caught up with it."""
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_runtime(url, embedded_projections=False) as runtime:
        play(WorkflowStore(runtime))
        runtime.catch_up()
    return url


@pytest.fixture
def head(sqlite_url: str) -> int:
    with open_runtime(sqlite_url, embedded_projections=False) as runtime:
        position = runtime.storage.max_position()
    assert position > 10
    return position


# -- status -----------------------------------------------------------------------------------


def test_status_prints_a_table_of_the_four_projections(
    sqlite_url: str, head: int, tmp_path: Path
) -> None:
    outcome = runledger("projections", "status", "--url", sqlite_url, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    for column in ("name", "version", "position", "lag", "last error"):
        assert column in outcome.stdout, outcome
    for name in NAMES:
        [line] = [line for line in outcome.stdout.splitlines() if f" {name} " in line]
        cells = line.split()
        assert str(head) in cells, line
        assert "0" in cells, line


def test_status_json_is_exactly_a_list_of_status_objects(
    sqlite_url: str, head: int, tmp_path: Path
) -> None:
    outcome = runledger("projections", "status", "--json", "--url", sqlite_url, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    statuses = json.loads(outcome.stdout)
    assert isinstance(statuses, list)
    assert sorted(status["name"] for status in statuses) == NAMES
    for status in statuses:
        assert set(status) == STATUS_KEYS, status
        assert isinstance(status["version"], int)
        assert (status["position"], status["lag"], status["last_error"]) == (head, 0, None)
        assert (status["active_version"], status["building_version"]) == (status["version"], None)


def test_status_json_shows_the_lag_of_projections_nobody_ran(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'unprojected.db'}"
    with open_runtime(url, embedded_projections=False) as runtime:
        play(WorkflowStore(runtime))
        head = runtime.storage.max_position()
    outcome = runledger("projections", "status", "--json", "--url", url, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    assert {(status["position"], status["lag"]) for status in json.loads(outcome.stdout)} == {
        (0, head)
    }


def test_status_on_a_memory_store(tmp_path: Path) -> None:
    outcome = runledger("projections", "status", "--url", "memory://", cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    for name in NAMES:
        assert name in outcome.stdout, outcome
    as_json = runledger("projections", "status", "--json", "--url", "memory://", cwd=tmp_path)
    assert as_json.returncode == 0, as_json
    assert sorted(
        (status["name"], status["position"], status["lag"]) for status in json.loads(as_json.stdout)
    ) == [(name, 0, 0) for name in NAMES]
    assert not list(tmp_path.iterdir()), "a memory store must not create files"


# -- rebuild ----------------------------------------------------------------------------------


SUMMARY = re.compile(r"(\d+) events in [\d.]+s \(([\d,]+) events/s\)")


def test_rebuild_one_projection(sqlite_url: str, head: int, tmp_path: Path) -> None:
    with open_store(sqlite_url, embedded_projections=False) as store:
        before = store.follow_up_queue("run-1")
    outcome = runledger(
        "projections", "rebuild", "follow_up_queue", "--url", sqlite_url, cwd=tmp_path
    )
    assert outcome.returncode == 0, outcome
    assert "rebuilt follow_up_queue" in outcome.stdout, outcome
    match = SUMMARY.search(outcome.stdout)
    assert match is not None, outcome
    assert int(match.group(1)) == head
    with open_store(sqlite_url, embedded_projections=False) as store:
        assert store.follow_up_queue("run-1") == before
        assert {status.lag for status in store.projection_status()} == {0}


def test_rebuild_all_projections(sqlite_url: str, head: int, tmp_path: Path) -> None:
    with open_store(sqlite_url, embedded_projections=False) as store:
        before = (store.follow_up_queue("run-1"), store.terminal_data("run-1"))
    outcome = runledger("projections", "rebuild", "--all", "--url", sqlite_url, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    line = " ".join(outcome.stdout.split())
    for name in NAMES:
        assert name in line, outcome
    match = SUMMARY.search(line)
    assert match is not None, outcome
    assert int(match.group(1)) == head
    with open_store(sqlite_url, embedded_projections=False) as store:
        assert (store.follow_up_queue("run-1"), store.terminal_data("run-1")) == before
        assert {(status.position, status.lag) for status in store.projection_status()} == {
            (head, 0)
        }


def test_rebuild_catches_up_projections_nobody_ran(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'unprojected.db'}"
    with open_store(url, embedded_projections=False) as store:
        play(store)
    outcome = runledger("projections", "rebuild", "--all", "--url", url, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    with open_store(url, embedded_projections=False) as store:
        terminal = store.terminal_data("run-1")
        assert terminal is not None
        assert (terminal.status, terminal.error) == ("failed", "boom")


def test_rebuild_of_an_unknown_projection_fails_with_its_error_code(
    sqlite_url: str, tmp_path: Path
) -> None:
    outcome = runledger("projections", "rebuild", "no_such_view", "--url", sqlite_url, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    error = " ".join(outcome.stderr.split())
    assert "[projection.unknown]" in error, outcome
    assert "no_such_view" in error, outcome
    assert "Traceback" not in outcome.stderr, outcome
    assert "rebuilt" not in outcome.stdout, outcome


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param([], "name a projection (follow_up_queue, ", id="neither-name-nor-all"),
        pytest.param(
            ["follow_up_queue", "--all"],
            "give one projection name or --all, not both",
            id="both-name-and-all",
        ),
    ],
)
def test_rebuild_needs_exactly_one_of_a_name_or_all(
    args: list[str], says: str, sqlite_url: str, tmp_path: Path
) -> None:
    outcome = runledger("projections", "rebuild", *args, "--url", sqlite_url, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert outcome.stderr.startswith("error [usage]: "), outcome
    assert says in outcome.stderr, outcome
    assert len(outcome.stderr.splitlines()) == 1, outcome


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_rebuild_splits_the_projections_over_the_processes_asked_for(
    backend: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    url = (
        f"sqlite:///{tmp_path / 'store.db'}"
        if backend == "sqlite"
        else str(request.getfixturevalue("postgres_store_url"))
    )
    with open_runtime(url, embedded_projections=False) as runtime:
        play(WorkflowStore(runtime))
        head = runtime.storage.max_position()

    outcome = runledger(
        "projections",
        "rebuild",
        "--all",
        "--processes",
        "3",
        "--json",
        "--url",
        url,
        cwd=tmp_path,
    )

    assert outcome.returncode == 0, outcome
    document = json.loads(outcome.stdout)
    assert document["switched"] is True
    assert sorted(each["name"] for each in document["projections"]) == NAMES
    assert {each["position"] for each in document["projections"]} == {head}
    with open_store(url, embedded_projections=False) as store:
        terminal = store.terminal_data("run-1")
        assert terminal is not None
        assert (terminal.status, terminal.error) == ("failed", "boom")
        assert {status.lag for status in store.projection_status()} == {0}


def test_a_memory_store_rebuilds_in_its_own_process_whatever_the_processes_asked_for() -> None:
    # A memory store cannot be shared with other processes (nor with a CLI's).
    with open_runtime("memory://", embedded_projections=False) as runtime:
        store = WorkflowStore(runtime)
        play(store)
        outcomes = runtime.rebuild_blue_green(processes=3)
        head = runtime.storage.max_position()

        assert all(outcome.switched for outcome in outcomes), outcomes
        assert {outcome.position for outcome in outcomes} == {head}
        terminal = store.terminal_data("run-1")
        assert terminal is not None
        assert terminal.status == "failed"


@pytest.mark.parametrize("processes", ["0", "-1", "two"])
def test_rebuild_refuses_a_count_of_processes_that_is_not_a_positive_integer(
    processes: str, sqlite_url: str, tmp_path: Path
) -> None:
    outcome = runledger(
        "projections",
        "rebuild",
        "--all",
        "--processes",
        processes,
        "--url",
        sqlite_url,
        cwd=tmp_path,
    )
    assert outcome.returncode == 2, outcome
    assert outcome.stderr.startswith("error [usage]: "), outcome
    assert "--processes" in outcome.stderr, outcome
    assert len(outcome.stderr.splitlines()) == 1, outcome
    assert "rebuilt" not in outcome.stdout, outcome


REBUILD_KEYS = {"events", "seconds", "switched", "projections"}
OUTCOME_KEYS = {
    "name",
    "version",
    "active_version",
    "slot",
    "read",
    "position",
    "live_position",
    "compared",
    "equal",
    "switched",
    "dropped",
    "live_digest",
    "rebuilt_digest",
    "first_differences",
    "tables",
}
VERIFY_KEYS = {"equal", "projections"}
VERIFIED_KEYS = {
    "name",
    "version",
    "position",
    "equal",
    "live_digest",
    "rebuilt_digest",
    "first_differences",
    "tables",
}
DIFFERENCE_KEYS = {"table", "key", "live", "rebuilt"}
"""The keys of ``projections rebuild --json`` and ``verify --json`` (README, "Projections")."""


def test_rebuild_json_has_exactly_its_documented_keys(sqlite_url: str, tmp_path: Path) -> None:
    outcome = runledger(
        "projections", "rebuild", "--all", "--json", "--url", sqlite_url, cwd=tmp_path
    )
    assert outcome.returncode == 0, outcome
    document = json.loads(outcome.stdout)
    assert set(document) == REBUILD_KEYS
    assert sorted(item["name"] for item in document["projections"]) == NAMES
    for item in document["projections"]:
        assert set(item) == OUTCOME_KEYS, item
        assert (item["compared"], item["equal"], item["switched"]) == ("rows", True, True)
    assert "rebuilding" not in outcome.stderr, "--json prints no progress"


def test_rebuild_drop_old_names_the_dropped_slot(sqlite_url: str, tmp_path: Path) -> None:
    outcome = runledger(
        "projections", "rebuild", "runs", "--drop-old", "--json", "--url", sqlite_url, cwd=tmp_path
    )
    assert outcome.returncode == 0, outcome
    [item] = json.loads(outcome.stdout)["projections"]
    assert (item["slot"], item["dropped"]) == (2, [1])


def test_verify_of_an_intact_store_exits_0(sqlite_url: str, head: int, tmp_path: Path) -> None:
    outcome = runledger("projections", "verify", "--all", "--url", sqlite_url, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    for name in NAMES:
        assert f"{name} v" in outcome.stdout, outcome
    assert f"equal to a replay at position {head}" in outcome.stdout, outcome
    assert "verifying" in outcome.stderr, "a progress bar on stderr"


def test_verify_json_has_exactly_its_documented_keys(sqlite_url: str, tmp_path: Path) -> None:
    outcome = runledger(
        "projections", "verify", "--all", "--json", "--url", sqlite_url, cwd=tmp_path
    )
    assert outcome.returncode == 0, outcome
    document = json.loads(outcome.stdout)
    assert set(document) == VERIFY_KEYS
    assert document["equal"] is True
    for item in document["projections"]:
        assert set(item) == VERIFIED_KEYS, item
        assert item["live_digest"] == item["rebuilt_digest"]
    assert outcome.stderr == "", "--json prints no progress"


def spoil_follow_up_prompt(url: str) -> None:
    path = url.removeprefix("sqlite:///")
    connection = sqlite3.connect(path)
    try:
        connection.execute("UPDATE rl_fuq_follow_ups_v1_1 SET prompt = 'spoiled'")
        connection.commit()
    finally:
        connection.close()


def test_verify_of_a_spoiled_row_exits_1_naming_the_first_differing_rows(
    sqlite_url: str, tmp_path: Path
) -> None:
    spoil_follow_up_prompt(sqlite_url)

    outcome = runledger(
        "projections", "verify", "follow_up_queue", "--url", sqlite_url, cwd=tmp_path
    )

    assert outcome.returncode == 1, outcome
    text = outcome.stdout
    assert "DIFFERS" in text, outcome
    assert "rl_fuq_follow_ups" in text, outcome
    assert '"prompt":"spoiled"' in text, outcome
    assert '"prompt":"Task 0"' in text, outcome


def test_verify_json_of_a_spoiled_row_gives_the_live_and_the_rebuilt_row(
    sqlite_url: str, tmp_path: Path
) -> None:
    spoil_follow_up_prompt(sqlite_url)

    outcome = runledger(
        "projections", "verify", "follow_up_queue", "--json", "--url", sqlite_url, cwd=tmp_path
    )

    assert outcome.returncode == 1, outcome
    [item] = json.loads(outcome.stdout)["projections"]
    first = item["first_differences"][0]
    assert set(first) == DIFFERENCE_KEYS
    assert (first["table"], first["live"]["prompt"], first["rebuilt"]["prompt"]) == (
        "rl_fuq_follow_ups",
        "spoiled",
        first["rebuilt"]["prompt"],
    )
    assert first["rebuilt"]["prompt"].startswith("Task ")
    assert item["tables"] == [
        {"table": "rl_fuq_follow_ups", "added": 0, "removed": 0, "changed": 3}
    ]


def test_verify_needs_exactly_one_of_a_name_or_all(sqlite_url: str, tmp_path: Path) -> None:
    outcome = runledger("projections", "verify", "--url", sqlite_url, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert "or pass --all (see 'runledger projections verify --help')" in outcome.stderr


# -- known bugs -------------------------------------------------------------------------------


def test_an_embedded_host_leaves_its_views_current_when_it_closes(tmp_path: Path) -> None:
    lags = []
    for trial in range(3):
        url = f"sqlite:///{tmp_path / f'host-{trial}.db'}"
        with open_store(url) as host:  # embedded projections, the default
            host.create_run("run-1", workflow_name="echo", input={"task": "reply"})
            host.projection_status()  # caught up; the follower goes back to sleep
            time.sleep(0.2)
            host.bind_origin_session("run-1", SESSION)
        outcome = runledger("projections", "status", "--json", "--url", url, cwd=tmp_path)
        assert outcome.returncode == 0, outcome
        lags.append(sorted(status["lag"] for status in json.loads(outcome.stdout)))
    assert lags == [[0] * len(NAMES)] * 3
