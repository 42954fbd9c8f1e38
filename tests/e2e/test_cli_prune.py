"""``runledger prune`` as an operator runs it: the real module in a subprocess, on a SQLite
file. A dry run writes nothing; a prune writes each tree's bundle and says where; ``audit``
of a pruned run prints its tombstone; a cutoff or folder that is no such thing is one
``error [code]`` line and exit 2."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from runledger.infrastructure.store import open_store
from tests.support.cli import runledger


def settled_store(url: str) -> None:
    with open_store(url) as store:
        store.create_run("root", workflow_name="review", input={})
        store.finish_run("root", status="completed")
        store.create_run("child", workflow_name="review", input={}, parent_run_id="root")
        store.finish_run("child", status="failed", error="boom")
        store.create_run("live", workflow_name="review", input={})


@pytest.fixture
def url(tmp_path: Path) -> str:
    address = f"sqlite:///{tmp_path / 'store.db'}"
    settled_store(address)
    return address


def test_a_dry_run_lists_what_would_go_and_writes_nothing(url: str, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()

    outcome = runledger(
        "prune", "--url", url, "--settled-before", "2099-01-01", "--archive", str(archive),
        "--dry-run", "--json", cwd=tmp_path,
    )  # fmt: skip

    assert outcome.returncode == 0, outcome
    report = outcome.json()
    assert report["dry_run"] is True
    assert [tree["run_ids"] for tree in report["prunable"]] == [["root", "child"]]
    assert [(tree["root_run_id"], tree["reason"]) for tree in report["kept"]] == [
        ("live", "run-not-ended")
    ]
    assert list(archive.iterdir()) == []


def test_prune_writes_the_bundles_and_audit_shows_the_tombstone(url: str, tmp_path: Path) -> None:
    archive = tmp_path / "archive"
    archive.mkdir()

    # A folder relative to where the operator stands: the tombstone records where it is.
    outcome = runledger(
        "prune", "--url", url, "--settled-before", "2099-01-01", "--archive", "archive",
        cwd=tmp_path,
    )  # fmt: skip

    assert outcome.returncode == 0, outcome
    [bundle] = archive.iterdir()
    assert bundle.is_absolute()
    sha = hashlib.sha256(bundle.read_bytes()).hexdigest()
    assert sha in outcome.stdout.replace("\n", "")
    assert "archived 1 tree(s), 2 run(s)" in outcome.stdout
    audited = runledger("audit", "child", "--url", url, cwd=tmp_path)
    assert audited.returncode == 0, audited
    assert f"{sha}  {bundle}" in audited.stdout
    assert "was pruned at" in audited.stdout
    as_json = runledger("audit", "root", "--url", url, "--json", cwd=tmp_path).json()
    assert (as_json["archived"]["bundle_sha256"], as_json["archived"]["bundle"]) == (
        sha,
        str(bundle),
    )
    verified = runledger("projections", "verify", "--all", "--url", url, cwd=tmp_path)
    assert verified.returncode == 0, verified
    shown = runledger("runs", "show", "root", "--url", url, cwd=tmp_path)
    assert shown.returncode == 2
    assert "error [run.archived]" in shown.stderr


def test_thirty_days_keeps_what_ended_today(url: str, tmp_path: Path) -> None:
    outcome = runledger(
        "prune", "--url", url, "--settled-before", "30d", "--archive", str(tmp_path),
        "--json", cwd=tmp_path,
    )  # fmt: skip

    assert outcome.returncode == 0, outcome
    assert [tree["reason"] for tree in outcome.json()["kept"]] == [
        "finished-after-cutoff",
        "run-not-ended",
    ]


@pytest.mark.parametrize(
    ("option", "value", "code"),
    [
        ("--settled-before", "last week", "retention.invalid-cutoff"),
        ("--archive", "no-such-folder", "retention.invalid-archive"),
    ],
)
def test_a_bad_cutoff_or_folder_is_one_error_line(
    url: str, tmp_path: Path, option: str, value: str, code: str
) -> None:
    given = {"--settled-before": "30d", "--archive": str(tmp_path), option: value}

    outcome = runledger(
        "prune", "--url", url, *(item for pair in given.items() for item in pair), cwd=tmp_path
    )

    assert outcome.returncode == 2, outcome
    assert outcome.stderr.startswith(f"error [{code}]: ")
    assert "Traceback" not in outcome.stderr
