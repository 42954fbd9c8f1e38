"""The command line's contract as a user meets it: read-only commands refuse a store that does
not exist, every mistake is one line with the documented exit code, help shows flags as
flags, ``runs list|show`` find runs, and the audit timeline reads well at any width."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger.infrastructure import open_store
from runledger.infrastructure.runtime import default_projections
from tests.support.cli import Outcome, runledger
from tests.support.postgres import PostgresServer

READ_ONLY = [
    pytest.param(["projections", "status"], id="projections-status"),
    pytest.param(["projections", "verify", "--all"], id="projections-verify"),
    pytest.param(["projections", "rebuild", "--all"], id="projections-rebuild"),
    pytest.param(["audit", "run-1"], id="audit"),
    pytest.param(["audit", "run-1", "--verify"], id="audit-verify"),
    pytest.param(["runs", "list"], id="runs-list"),
    pytest.param(["runs", "show", "run-1"], id="runs-show"),
    pytest.param(["compact"], id="compact"),
]


def one_line(outcome: Outcome) -> str:
    lines = outcome.stderr.splitlines()
    assert len(lines) == 1, outcome
    assert "Traceback" not in outcome.stderr, outcome
    return lines[0]


@pytest.mark.parametrize("command", READ_ONLY)
def test_a_read_only_command_refuses_a_store_that_does_not_exist(
    command: list[str], tmp_path: Path
) -> None:
    outcome = runledger(*command, "--url", "sqlite:///typo.db", cwd=tmp_path)

    assert outcome.returncode == 2, outcome
    line = one_line(outcome)
    assert line.startswith("error [store.not-found]: No runledger store at sqlite:///typo.db")
    assert "sqlite:/// and a relative path is read from the current folder" in line
    assert list(tmp_path.iterdir()) == []


def test_a_missing_folder_is_one_line_and_makes_nothing(tmp_path: Path) -> None:
    outcome = runledger("demo", "--url", "sqlite:///no/such/folder/x.db", cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert one_line(outcome).startswith("error [store.invalid-path]: ")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["serve", "--port", "99999"], "Invalid value for '--port'"),
        (["serve", "--public-reads", "true"], "unexpected extra argument"),
        (["bench", "--only", "P99"], "unknown row P99; the rows are P1, P2, P2b"),
        (["bench", "--quick", "--full"], "--quick and --full exclude each other"),
        (["projections", "rebuild", "runs", "--all"], "give one projection name or --all"),
        (["projections", "status", "--bogus"], "No such option: --bogus"),
        (["audit", "run-1", "--as-of", "-1"], "Invalid value for '--as-of'"),
        (["runs", "list", "--status", "sleeping"], "Invalid value for '--status'"),
        (["nope"], "No such command 'nope'"),
    ],
)
def test_a_usage_mistake_is_one_line_and_exit_two(
    args: list[str], says: str, tmp_path: Path
) -> None:
    outcome = runledger(*args, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    line = one_line(outcome)
    assert line.startswith("error [usage]: "), outcome
    assert says in line, outcome


def test_the_bench_on_a_memory_store_says_which_backends_it_measures(tmp_path: Path) -> None:
    outcome = runledger("bench", "--quick", "--only", "P1", "--url", "memory://", cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert one_line(outcome) == (
        "error [bench.unsupported-url]: runledger bench measures SQLite and PostgreSQL, "
        "not 'memory://': use sqlite:///path or postgresql://…"
    )


def test_the_bench_on_a_server_it_cannot_reach_says_why_in_one_line(tmp_path: Path) -> None:
    # Its scratch databases are made through a connection of its own, not the store's: a
    # refusal there was an internal error with libpq's words.
    url = "postgresql://alice:s3cret@127.0.0.1:1/runs"
    outcome = runledger("bench", "--quick", "--only", "P10", "--url", url, cwd=tmp_path)
    assert outcome.returncode == 3, outcome
    assert one_line(outcome) == (
        "error [store.unavailable]: Storage at alice@127.0.0.1:1/runs is unavailable: "
        "refused (Connection refused)"
    )
    assert "s3cret" not in outcome.stdout + outcome.stderr


def test_the_bench_refuses_a_wrong_url_parameter_before_it_starts(tmp_path: Path) -> None:
    url = "postgresql://alice:s3cret@127.0.0.1:1/runs?pooler=statement"
    outcome = runledger("bench", "--quick", "--only", "X1", "--url", url, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert outcome.stderr.strip() == (
        "error [store.invalid-parameter]: Store URL parameter pooler='statement': "
        "must be one of none, session, transaction"
    )
    assert "s3cret" not in outcome.stdout + outcome.stderr


def test_an_unknown_projection_is_bad_input_naming_the_known_ones(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    open_store(url).close()
    outcome = runledger("projections", "rebuild", "nope", "--url", url, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert "known projections: follow_up_queue" in one_line(outcome)


def test_help_shows_flags_as_flags_and_lists_the_projection_names(tmp_path: Path) -> None:
    rebuild = runledger("projections", "rebuild", "--help", cwd=tmp_path)
    serve = runledger("serve", "--help", cwd=tmp_path)
    assert rebuild.returncode == serve.returncode == 0
    assert "<bool>" not in rebuild.stdout + serve.stdout
    assert "--public-reads" in serve.stdout
    flat = " ".join(rebuild.stdout.split())
    for projection in default_projections():
        assert projection.name in flat


def test_the_top_level_help_documents_the_exit_codes(tmp_path: Path) -> None:
    outcome = runledger("--help", cwd=tmp_path)
    flat = " ".join(outcome.stdout.split())
    assert "0 ok, 1 a verification found a difference, 2 bad usage or input" in flat
    for command in ("demo", "runs", "projections", "audit", "bench", "serve"):
        assert command in outcome.stdout


# -- runs list | show -----------------------------------------------------------------------


@pytest.fixture(
    scope="module",
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ],
)
def demo_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A store the demo played its story into, shared by the module's tests (they only read)."""
    folder = tmp_path_factory.mktemp("demo")
    if request.param == "sqlite":
        url, name = f"sqlite:///{folder / 'demo.db'}", None
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        name = server.new_database_name()
        url = server.create_database(name)
    try:
        outcome = runledger("demo", "--url", url, cwd=folder)
        assert outcome.returncode == 0, outcome
        yield url
    finally:
        if name is not None:
            server.drop_database(name)


def listed(url: str, tmp_path: Path, *args: str) -> dict[str, object]:
    outcome = runledger("runs", "list", "--json", "--url", url, *args, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    page: dict[str, object] = json.loads(outcome.stdout)
    return page


def test_runs_list_pages_through_every_run_of_the_store(demo_url: str, tmp_path: Path) -> None:
    with open_store(demo_url, create=False) as store:
        expected = [run.run_id for run in store.list_runs(limit=1000).runs]
    assert len(expected) >= 3
    seen: list[str] = []
    after: list[str] = []
    while True:
        page = listed(demo_url, tmp_path, "--limit", "2", *after)
        seen += [run["run_id"] for run in page["runs"]]  # type: ignore[attr-defined]
        if page["next_after"] is None:
            break
        after = ["--after", str(page["next_after"])]
    assert seen == expected


def test_runs_list_filters_by_status_and_root(demo_url: str, tmp_path: Path) -> None:
    with open_store(demo_url, create=False) as store:
        runs = store.list_runs(limit=1000).runs
    failed = {run.run_id for run in runs if run.status == "failed"}
    root = runs[0].root_run_id
    tree = {run.run_id for run in runs if run.root_run_id == root}
    by_status = listed(demo_url, tmp_path, "--status", "failed")["runs"]
    by_root = listed(demo_url, tmp_path, "--root", root)["runs"]
    assert {run["run_id"] for run in by_status} == failed  # type: ignore[attr-defined]
    assert {run["run_id"] for run in by_root} == tree  # type: ignore[attr-defined]


@pytest.mark.parametrize("columns", [60, 80, 140])
def test_runs_list_shows_whole_run_ids_at_any_width(
    demo_url: str, tmp_path: Path, columns: int
) -> None:
    with open_store(demo_url, create=False) as store:
        ids = [run.run_id for run in store.list_runs(limit=1000).runs]
    outcome = runledger("runs", "list", "--url", demo_url, cwd=tmp_path, columns=columns)
    assert outcome.returncode == 0, outcome
    lines = outcome.stdout.splitlines()
    assert all(len(line.rstrip()) <= columns for line in lines)
    for run_id in ids:
        if len(run_id) < columns - 2:
            assert any(run_id in line for line in lines), (run_id, outcome.stdout)


def test_runs_show_gives_the_record_lineage_queue_and_terminal_data(
    demo_url: str, tmp_path: Path
) -> None:
    with open_store(demo_url, create=False) as store:
        runs = store.list_runs(limit=1000).runs
    root = runs[0]
    children = [run.run_id for run in runs if run.parent_run_id == root.run_id]
    outcome = runledger("runs", "show", root.run_id, "--json", "--url", demo_url, cwd=tmp_path)
    assert outcome.returncode == 0, outcome
    shown = json.loads(outcome.stdout)
    assert set(shown) == {"run", "children", "follow_up_queue", "terminal_data"}
    assert shown["run"]["run_id"] == root.run_id
    assert [child["run_id"] for child in shown["children"]] == children
    assert shown["follow_up_queue"]["run_id"] == root.run_id
    assert shown["terminal_data"]["run_id"] == root.run_id
    table = runledger("runs", "show", root.run_id, "--url", demo_url, cwd=tmp_path, columns=80)
    assert table.returncode == 0, table
    assert root.workflow_name in table.stdout


def test_runs_show_of_an_unknown_run_is_run_not_found(demo_url: str, tmp_path: Path) -> None:
    outcome = runledger("runs", "show", "no-such-run", "--url", demo_url, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert one_line(outcome) == "error [run.not-found]: Workflow run not found: no-such-run"


def test_runs_list_on_an_empty_memory_store_says_so(tmp_path: Path) -> None:
    outcome = runledger("runs", "list", "--url", "memory://", cwd=tmp_path)
    assert (outcome.returncode, outcome.stdout.strip()) == (0, "no runs"), outcome


# -- audit ------------------------------------------------------------------------------------


def audited(url: str, tmp_path: Path) -> str:
    with open_store(url, create=False) as store:
        return store.list_runs(limit=1).runs[0].run_id


@pytest.mark.parametrize("columns", [60, 80, 140])
def test_the_audit_timeline_never_cuts_an_event_name_or_actor(
    demo_url: str, tmp_path: Path, columns: int
) -> None:
    run_id = audited(demo_url, tmp_path)
    with open_store(demo_url, create=False) as store:
        trail = store.audit_run(run_id)
    outcome = runledger("audit", run_id, "--url", demo_url, cwd=tmp_path, columns=columns)
    assert outcome.returncode == 0, outcome
    lines = outcome.stdout.splitlines()
    assert all(len(line.rstrip()) <= columns for line in lines), outcome.stdout
    words = [re.escape(entry.wire_name) for entry in trail.entries] + [
        re.escape(entry.actor.type + (f":{entry.actor.id}" if entry.actor.id else ""))
        for entry in trail.entries
    ]
    for word in words:
        assert any(re.search(rf"(^|\s){word}(\s|$)", line) for line in lines), (word, columns)


def test_audit_as_of_beyond_the_log_is_an_error(demo_url: str, tmp_path: Path) -> None:
    run_id = audited(demo_url, tmp_path)
    outcome = runledger("audit", run_id, "--as-of", "999999", "--url", demo_url, cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert one_line(outcome).startswith(
        "error [query.as-of-beyond-log]: Log position as_of 999999 is beyond the end of the log"
    )


def test_audit_export_prints_the_bundles_sha256_and_what_it_covers(
    demo_url: str, tmp_path: Path
) -> None:
    run_id = audited(demo_url, tmp_path)
    bundle = tmp_path / "bundle.jsonl"
    outcome = runledger(
        "audit", run_id, "--verify", "--export", str(bundle), "--url", demo_url, cwd=tmp_path
    )
    assert outcome.returncode == 0, outcome
    digest = hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert f"{digest}  {bundle}" in outcome.stdout.splitlines()
    flat = " ".join(outcome.stdout.split())
    assert "(the run's whole tree)" in flat
    assert "events of the run alone (--lineage adds its tree)" in flat
    as_json = runledger(
        "audit",
        run_id,
        "--export",
        str(bundle),
        "--lineage",
        "--json",
        "--url",
        demo_url,
        cwd=tmp_path,
    )
    export = json.loads(as_json.stdout)["export"]
    assert export["lineage"] is True
    assert export["sha256"] == hashlib.sha256(bundle.read_bytes()).hexdigest()


def test_verify_bundle_of_a_missing_file_is_one_usage_line(tmp_path: Path) -> None:
    outcome = runledger("audit", "verify-bundle", str(tmp_path / "nope.jsonl"), cwd=tmp_path)
    assert outcome.returncode == 2, outcome
    assert one_line(outcome).startswith("error [usage]: ")
