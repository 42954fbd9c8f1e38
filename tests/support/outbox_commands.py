"""Upstream's ``cancelPendingForSource`` (D5) as a command: no host surface offers it (DESIGN's
public API does not list it), so the scenarios run the domain rule through the application's
``execute``, the way every command commits."""

from __future__ import annotations

from runledger.domain import outbox
from runledger.domain.application import WorkflowRuns
from runledger.domain.ports import CommandUnit
from runledger.domain.values import HOST, MessageKind


def cancel_pending_for_source(
    app: WorkflowRuns, source_id: str, *, kind: MessageKind | None = None
) -> int:
    """Cancel every pending message of a source (and kind) as the host; returns how many."""

    def command(unit: CommandUnit) -> int:
        return outbox.cancel_pending_for_source(
            unit, source_id, kind=kind, actor=HOST, now=unit.now
        )

    return app.execute(command)
