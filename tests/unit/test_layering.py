"""Dependencies point inward: domain <- projections <- infrastructure (DESIGN.md "Layout")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {
    "domain": ("projections", "infrastructure"),
    "projections": ("infrastructure",),
}


def python_files(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def package_of(path: Path, root: Path) -> list[str]:
    """The package a file's relative imports start from, as name parts."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    return parts[:-1]


def imported_modules(path: Path, root: Path = ROOT) -> set[str]:
    """Every module (and imported name) a file imports, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = package_of(path, root)
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            prefix = ".".join([*base, *([node.module] if node.module else [])])
            found.add(prefix)
            found.update(f"{prefix}.{alias.name}".lstrip(".") for alias in node.names)
    return found


def is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize(("layer", "forbidden"), FORBIDDEN.items())
def test_a_layer_imports_nothing_from_the_layers_outside_it(
    layer: str, forbidden: tuple[str, ...]
) -> None:
    files = python_files(layer)
    assert files, f"no Python files under {layer}/"
    offending = sorted(
        f"{path.relative_to(ROOT)} imports {module}"
        for path in files
        for module in imported_modules(path)
        if any(is_within(module, outer) for outer in forbidden)
    )
    assert offending == []


def test_the_import_scanner_sees_absolute_relative_and_nested_imports(tmp_path: Path) -> None:
    package = tmp_path / "domain"
    package.mkdir()
    source = package / "sample.py"
    source.write_text(
        "import infrastructure.store\n"
        "from . import projections_helper\n"
        "from .. import infrastructure\n"
        "from .events import LedgerEvent\n"
        "def later():\n"
        "    from projections.base import Projection\n",
        encoding="utf-8",
    )
    modules = imported_modules(source, tmp_path)
    assert {
        "infrastructure.store",
        "domain.projections_helper",
        "infrastructure",
        "domain.events",
        "projections.base",
    } <= modules


def test_a_layer_contains_its_submodules_but_not_lookalike_names() -> None:
    assert is_within("projections", "projections")
    assert is_within("projections.base", "projections")
    assert not is_within("projections_extra", "projections")
