"""The README's "Layout" map matches the tree: every file it names exists where it names it,
and every package folder under ``domain/``, ``projections/`` and ``infrastructure/`` has its
entry."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "projections", "infrastructure")
NAME_COLUMN = 17
"""Where an entry's text starts: a line with a folder name before it begins an entry."""
ENTRY = re.compile(r"^(?P<indent> *)(?P<folder>[\w.]+/) +\S")
MODULE = re.compile(r"(?<![\w./*])[\w*]+\.py\b")


def layout_map() -> list[str]:
    """The lines of the fenced block under the README's "## Layout" heading."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("\n## Layout\n", 1)[1]
    return section.split("```\n", 2)[1].splitlines()


def entries() -> dict[str, list[str]]:
    """Each entry's folder (relative to the repository) -> the module names its text gives."""
    found: dict[str, list[str]] = {}
    stack: list[tuple[int, str]] = []
    folder = ""
    for line in layout_map():
        entry = ENTRY.match(line)
        if entry is not None and len(entry["indent"]) < NAME_COLUMN:
            indent = len(entry["indent"])
            while stack and stack[-1][0] >= indent:
                stack.pop()
            parent = stack[-1][1] if stack else ""
            folder = f"{parent}{entry['folder']}"
            stack.append((indent, folder))
            found[folder] = []
            text = line[len(entry["indent"]) + len(entry["folder"]) :]
        else:
            text = line
        found[folder].extend(MODULE.findall(text))
    return found


def test_the_layout_map_names_only_files_that_exist() -> None:
    missing = [
        f"{folder}{name}"
        for folder, names in entries().items()
        for name in names
        if not list((ROOT / folder).glob(name))
    ]
    assert missing == []


def test_the_layout_map_has_an_entry_for_every_package_folder() -> None:
    packages = {
        f"{init.parent.relative_to(ROOT).as_posix()}/"
        for layer in LAYERS
        for init in (ROOT / layer).rglob("__init__.py")
    }
    assert packages - set(entries()) == set()
