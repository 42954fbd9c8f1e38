"""Dependencies point inward and never in a circle (DESIGN.md "Layout … and the import name").

The folders ``domain/``, ``projections/`` and ``infrastructure/`` are installed as
``runledger.domain``, ``runledger.projections`` and ``runledger.infrastructure``; this test reads
their sources as text, so it checks the code as written, not as some import order happens to
load it.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
LAYERS = ("domain", "projections", "infrastructure")
FORBIDDEN = {
    "runledger.domain": ("runledger.projections", "runledger.infrastructure"),
    "runledger.projections": ("runledger.infrastructure",),
}
BARE_NAMES = tuple(LAYERS)


def module_name(path: Path, root: Path = ROOT) -> str:
    """The installed name of a source file: ``domain/runs.py`` is ``runledger.domain.runs``."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(["runledger", *parts])


def package_of(path: Path, root: Path = ROOT) -> list[str]:
    """The package a file's relative imports start from, as name parts."""
    name = module_name(path, root).split(".")
    return name if path.name == "__init__.py" else name[:-1]


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


def source_files(root: Path = ROOT) -> dict[str, Path]:
    """Every module of the three layers by its installed name."""
    return {
        module_name(path, root): path
        for layer in LAYERS
        if (root / layer).is_dir()
        for path in sorted((root / layer).rglob("*.py"))
    }


def import_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the project modules it imports (a name imported from a package counts as the
    package unless the name is a module of its own)."""
    modules = source_files(root)
    return {
        name: {
            imported
            for imported in imported_modules(path, root)
            if imported in modules and imported != name
        }
        for name, path in modules.items()
    }


def find_cycle(graph: Mapping[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*stack[stack.index(nxt) :], nxt]
            if nxt not in state and (cycle := visit(nxt)) is not None:
                return cycle
        stack.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)) is not None:
            return cycle
    return None


def is_within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


@pytest.mark.parametrize(("layer", "forbidden"), FORBIDDEN.items())
def test_a_layer_imports_nothing_from_the_layers_outside_it(
    layer: str, forbidden: tuple[str, ...]
) -> None:
    files = {name: path for name, path in source_files().items() if is_within(name, layer)}
    assert files, f"no Python files in {layer}"
    offending = sorted(
        f"{name} imports {module}"
        for name, path in files.items()
        for module in imported_modules(path)
        if any(is_within(module, outer) for outer in forbidden)
    )
    assert offending == []


def test_no_module_imports_the_bare_folder_names() -> None:
    offending = sorted(
        f"{name} imports {module}"
        for name, path in source_files().items()
        for module in imported_modules(path)
        if any(is_within(module, bare) for bare in BARE_NAMES)
    )
    assert offending == []


def test_no_two_modules_import_each_other_in_a_circle() -> None:
    assert find_cycle(import_graph()) is None


def test_the_cycle_finder_finds_a_cycle_inside_a_layer(tmp_path: Path) -> None:
    (tmp_path / "domain").mkdir()
    (tmp_path / "domain" / "__init__.py").write_text("")
    (tmp_path / "domain" / "a.py").write_text("from runledger.domain.b import x\n")
    (tmp_path / "domain" / "b.py").write_text("def f():\n    from . import a\n")
    (tmp_path / "domain" / "c.py").write_text("from runledger.domain import a\n")
    graph = import_graph(tmp_path)
    assert graph["runledger.domain.c"] == {"runledger.domain", "runledger.domain.a"}
    assert find_cycle(graph) == ["runledger.domain.a", "runledger.domain.b", "runledger.domain.a"]


def test_the_cycle_finder_accepts_a_diamond() -> None:
    graph = {"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}
    assert find_cycle(graph) is None


def test_the_import_scanner_sees_absolute_relative_and_nested_imports(tmp_path: Path) -> None:
    package = tmp_path / "domain"
    package.mkdir()
    source = package / "sample.py"
    source.write_text(
        "import runledger.infrastructure.store\n"
        "from . import projections_helper\n"
        "from .. import infrastructure\n"
        "from .events import LedgerEvent\n"
        "def later():\n"
        "    from runledger.projections.base import Projection\n",
        encoding="utf-8",
    )
    modules = imported_modules(source, tmp_path)
    assert {
        "runledger.infrastructure.store",
        "runledger.domain.projections_helper",
        "runledger.infrastructure",
        "runledger.domain.events",
        "runledger.projections.base",
    } <= modules


def test_a_layer_contains_its_submodules_but_not_lookalike_names() -> None:
    assert is_within("runledger.projections", "runledger.projections")
    assert is_within("runledger.projections.base", "runledger.projections")
    assert not is_within("runledger.projections_extra", "runledger.projections")


STORAGE_BACKENDS = tuple(
    f"runledger.infrastructure.storage.{backend}" for backend in ("memory", "sqlite", "postgres")
)


def test_the_views_import_no_storage_backend() -> None:
    # Views and storage share a database, not code: what both need is in databases.py.
    offending = sorted(
        f"{name} imports {module}"
        for name, path in source_files().items()
        if is_within(name, "runledger.infrastructure.views")
        for module in imported_modules(path)
        if any(is_within(module, backend) for backend in STORAGE_BACKENDS)
    )
    assert offending == []


LIBRARY_PERSISTENCE = ("eventsourcing.persistence", "eventsourcing.popo")


def test_the_domain_imports_no_persistence_module_of_the_library() -> None:
    # How a command commits lives in infrastructure/commits/; the domain sees ports only.
    offending = sorted(
        f"{name} imports {module}"
        for name, path in source_files().items()
        if is_within(name, "runledger.domain")
        for module in imported_modules(path)
        if any(is_within(module, library) for library in LIBRARY_PERSISTENCE)
    )
    assert offending == []


def test_the_commit_machinery_lives_in_the_commits_package() -> None:
    # The domain's application holds the commands: no unit of work, retry or save of its own.
    tree = ast.parse((ROOT / "domain" / "application.py").read_text(encoding="utf-8"))
    defined = {
        node.name for node in ast.walk(tree) if isinstance(node, ast.ClassDef | ast.FunctionDef)
    }
    assert defined.isdisjoint({"UnitOfWork", "_save", "_take_due_snapshots", "_note_conflict"})
    assert "time" not in imported_modules(ROOT / "domain" / "application.py")
