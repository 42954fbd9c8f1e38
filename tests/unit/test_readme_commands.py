"""The README's two opening commands are the ones CI and a new user run."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _opening_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    return re.findall(r"```sh\n(.+?)\n```", readme, flags=re.DOTALL)[:2]


def test_ci_runs_exactly_the_readme_test_command() -> None:
    demo, tests = _opening_commands()
    assert "runledger demo" in demo
    assert "pytest" in tests
    ci_lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert tests in ci_lines
