"""Every CLI command that names its store prints the URL without its password, on success and
on failure (the test server trusts local connections, so the password is carried, unused)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.cli import Outcome, runledger

PASSWORD = "never-print-me-42"

pytestmark = pytest.mark.postgres


@pytest.fixture
def secret_url(postgres_store_url: str) -> str:
    """The test database's URL with a password in it."""
    return postgres_store_url.replace("://postgres@", f"://postgres:{PASSWORD}@", 1)


def assert_secret_kept(outcome: Outcome) -> None:
    assert PASSWORD not in outcome.stdout, outcome
    assert PASSWORD not in outcome.stderr, outcome


@pytest.mark.parametrize(
    "command",
    [
        ["demo"],
        ["projections", "status"],
        ["projections", "status", "--json"],
        ["projections", "rebuild", "--all"],
    ],
    ids=" ".join,
)
def test_a_command_prints_its_store_without_the_password(
    command: list[str], secret_url: str, tmp_path: Path
) -> None:
    outcome = runledger(*command, "--url", secret_url, cwd=tmp_path)

    assert outcome.returncode == 0, outcome
    assert_secret_kept(outcome)


def test_the_demo_names_its_store_with_the_password_masked(secret_url: str, tmp_path: Path) -> None:
    outcome = runledger("demo", "--url", secret_url, cwd=tmp_path)

    assert "postgres:***@127.0.0.1" in outcome.stdout


def test_the_bench_never_prints_the_password(secret_url: str, tmp_path: Path) -> None:
    outcome = runledger("bench", "--quick", "--only", "P1", "--url", secret_url, cwd=tmp_path)

    assert outcome.returncode == 0, outcome
    assert_secret_kept(outcome)


def test_an_unreachable_store_is_reported_without_the_password(tmp_path: Path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:{port}/runledger"

    outcome = runledger("projections", "status", "--url", url, cwd=tmp_path)

    assert outcome.returncode == 3, outcome
    assert "[store.unavailable]" in outcome.stderr
    assert f"postgres@127.0.0.1:{port}/runledger is unavailable: refused" in outcome.stderr
    assert_secret_kept(outcome)
