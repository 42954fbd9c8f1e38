"""The terminal data read model: upstream §6 ``readTerminalData``, eight fields per ended run."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar, Final

from runledger.domain.records import TerminalData
from runledger.domain.runs import Run
from runledger.domain.values import DEFAULT_PRESENTATION_INSTRUCTIONS, TERMINAL_STATUSES
from runledger.projections.base import (
    HandledProjection,
    Handler,
    ProjectedEvent,
    Table,
    ViewReader,
    ViewWriter,
)

# ``status`` stays None until the run ends: only ended runs are answered, and nothing
# changes a run's status after ``run.finished``, so progress events are not needed here.
RUNS: Final = Table(
    name="rl_td_runs",
    columns=(
        ("run_id", "text"),
        ("status", "text"),
        ("status_detail", "text"),
        ("input", "json"),
        ("final_output", "json"),
        ("error", "text"),
        ("presentation_instructions", "text"),
        ("restart_number", "int"),
    ),
    key=("run_id",),
    owner="run_id",
)


def _run_created(event: ProjectedEvent, view: ViewWriter) -> None:
    view.put(
        RUNS,
        {
            "run_id": event["run_id"],
            "status": None,
            "status_detail": None,
            "input": event["input"],
            "final_output": None,
            "error": None,
            "presentation_instructions": None,
            "restart_number": event["restart_number"],
        },
    )


def _instructions_set(event: ProjectedEvent, view: ViewWriter) -> None:
    # Instructions may be stored after the run ended; the latest stored text is answered.
    row = view.get(RUNS, (event["run_id"],))
    if row is None:
        return
    row["presentation_instructions"] = event["instructions"]
    view.put(RUNS, row)


def _run_finished(event: ProjectedEvent, view: ViewWriter) -> None:
    row = view.get(RUNS, (event["run_id"],))
    if row is None:
        return
    row["status"] = event["status"]
    row["status_detail"] = event["status_detail"]
    row["final_output"] = event["final_output"]
    row["error"] = event["error"]
    view.put(RUNS, row)


_HANDLERS: Final[dict[str, Handler]] = {
    Run.Created.TOPIC: _run_created,
    Run.PresentationInstructionsSet.TOPIC: _instructions_set,
    Run.Finished.TOPIC: _run_finished,
}


class TerminalDataProjection(HandledProjection):
    """Projects each run's input, lineage restart number and, once it ends, its outcome."""

    name: ClassVar[str] = "terminal_data"
    version: ClassVar[int] = 1
    tables: ClassVar[Sequence[Table]] = (RUNS,)
    rebuild_weight: ClassVar[int] = 1
    handlers = _HANDLERS


def terminal_data(reader: ViewReader, run_id: str) -> TerminalData | None:
    """The ended run's eight terminal fields; None for an unknown or not yet ended run."""
    if not isinstance(run_id, str):
        return None
    row = reader.get(RUNS, (run_id,))
    if row is None or row["status"] not in TERMINAL_STATUSES:
        return None
    detail = row["status_detail"]
    error = row["error"]
    instructions = row["presentation_instructions"]
    return TerminalData(
        run_id=row["run_id"],
        status=row["status"],
        status_detail=detail if isinstance(detail, str) else None,
        input=row["input"],
        final_output=row["final_output"],
        # Upstream reads the error as text, never as JSON (DESIGN decision 5).
        error=error if isinstance(error, str) else None,
        presentation_instructions=(
            instructions if isinstance(instructions, str) else DEFAULT_PRESENTATION_INSTRUCTIONS
        ),
        restart_number=row["restart_number"],
    )
