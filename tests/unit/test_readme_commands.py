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


def test_ci_runs_readme_command_one_verbatim_in_a_fresh_copy_before_the_tests() -> None:
    demo, tests = _opening_commands()
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "[test]" not in demo, "command 1 is what a new user runs: no extras"
    # Verbatim, as one bash -c argument, in the scratch copy; and before the test command.
    quoted = f"bash -euo pipefail -c '{demo}'"
    assert quoted in script
    assert script.index(quoted) < script.index(tests)
    run_line = next(line for line in script.splitlines() if quoted in line)
    assert run_line.lstrip().startswith('(cd "$first_contact" && ')


PROJECT_PATH = re.compile(
    r"\b(?:infrastructure|domain|projections|tests|docs)/[\w/.-]+\.(?:py|md)\b"
)


def test_every_file_the_documents_name_exists() -> None:
    """A reader follows the README and docs to the code and tests they cite; a module moved
    since (``storage/group_commit.py`` went to ``commits/``) must take its mentions along."""
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    cited = {
        (document.name, path)
        for document in documents
        for path in PROJECT_PATH.findall(document.read_text(encoding="utf-8"))
    }
    assert len(cited) > 20, "the pattern still finds the documents' citations"
    assert [(name, path) for name, path in sorted(cited) if not (ROOT / path).exists()] == []
