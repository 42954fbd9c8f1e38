"""``runledger restore`` as an operator runs it, on a SQLite file: a pruned tree comes back
from its bundle and answers again; a second restore, a missing file and a tampered bundle are
one ``error [code]`` line and exit 2, with nothing written."""

from __future__ import annotations

from pathlib import Path

from runledger.infrastructure.store import open_store
from tests.e2e.test_cli_prune import settled_store
from tests.support.cli import runledger


def pruned(tmp_path: Path) -> tuple[str, Path]:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    settled_store(url)
    archive = tmp_path / "archive"
    archive.mkdir()
    outcome = runledger(
        "prune", "--url", url, "--settled-before", "2099-01-01", "--archive", str(archive),
        cwd=tmp_path,
    )  # fmt: skip
    assert outcome.returncode == 0, outcome
    [bundle] = archive.iterdir()
    return url, bundle


def test_restore_puts_the_tree_back(tmp_path: Path) -> None:
    url, bundle = pruned(tmp_path)

    outcome = runledger("restore", str(bundle), "--url", url, "--json", cwd=tmp_path)

    assert outcome.returncode == 0, outcome
    restored = outcome.json()
    assert (restored["root_run_id"], restored["run_ids"]) == ("root", ["root", "child"])
    shown = runledger("runs", "show", "child", "--url", url, cwd=tmp_path)
    assert shown.returncode == 0, shown
    assert "boom" in shown.stdout
    verified = runledger("projections", "verify", "--all", "--url", url, cwd=tmp_path)
    assert verified.returncode == 0, verified
    text = runledger("restore", str(bundle), "--url", url, cwd=tmp_path)
    assert text.returncode == 2
    assert text.stderr.startswith("error [retention.restore-refused]: ")
    assert "restored from it already" in text.stderr
    assert "Traceback" not in text.stderr


def test_a_missing_or_tampered_bundle_is_refused_with_nothing_written(tmp_path: Path) -> None:
    url, bundle = pruned(tmp_path)
    tampered = tmp_path / "tampered.jsonl"
    tampered.write_text(
        bundle.read_text(encoding="utf-8").replace('"boom"', '"fine"'), encoding="utf-8"
    )
    with open_store(url) as store:
        log = store.event_log()

    for path, reason in (
        (str(tmp_path / "none.jsonl"), "no such file"),
        (str(tampered), "does not verify"),
        (str(tmp_path), "it is a folder, not a bundle file"),
        # Named as given, not as the current folder an empty ``Path`` would be.
        ("", 'Cannot restore from "": the path is empty'),
    ):
        outcome = runledger("restore", path, "--url", url, cwd=tmp_path)
        assert outcome.returncode == 2, outcome
        assert outcome.stderr.startswith("error [retention.restore-refused]: ")
        assert reason in outcome.stderr
        assert len(outcome.stderr.strip().splitlines()) == 1

    with open_store(url) as store:
        assert store.event_log() == log
