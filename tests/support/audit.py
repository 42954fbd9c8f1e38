"""The demo story as audit material, and ways to tamper with stored rows and bundles."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console

from runledger.infrastructure.cli.demo_story import DemoIds, DemoResult, DemoScenario
from runledger.infrastructure.cli.render import Narrator
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.store import PageCommit, encode_row
from runledger.projections.base import Key, Projection, Row, Table


def play_demo(store: WorkflowStore, token: str = "audit") -> DemoResult:
    """The demo story on ``store``, told to nobody; its failed run is ``logged_run``."""
    narrator = Narrator(Console(file=io.StringIO(), width=120))
    return DemoScenario(store, narrator, DemoIds.fresh(token)).run()


def projection_of(runtime: StoreRuntime, name: str) -> Projection:
    return runtime.projector.runner(name).projection


def overwrite_rows(
    runtime: StoreRuntime, projection: Projection, table: Table, rows: dict[Key, Row | None]
) -> None:
    """Change stored view rows behind the projections' back (None deletes a row)."""
    slot = {state.name: state for state in runtime.views.tracking()}[projection.name]
    changes = {key: None if row is None else encode_row(table, row) for key, row in rows.items()}
    page = PageCommit(projection, slot.position, slot.position, {table.name: changes}, slot)
    runtime.views.commit([page])


# -- bundles ------------------------------------------------------------------------------


def read_lines(path: Path) -> list[dict[str, Any]]:
    """The bundle's lines, parsed ("\n" alone ends a line: text may hold U+2028 unescaped)."""
    return [orjson.loads(line) for line in path.read_bytes().split(b"\n") if line]


def write_lines(path: Path, lines: list[dict[str, Any]]) -> None:
    path.write_bytes(b"".join(orjson.dumps(line) + b"\n" for line in lines))


def event_lines(lines: list[dict[str, Any]]) -> list[int]:
    """Indexes of the event lines."""
    return [index for index, line in enumerate(lines) if line["kind"] == "event"]
