"""Session recording inputs as a host sends them: a binding, event records, a capture."""

from __future__ import annotations

from typing import Any


def session_binding(run_id: str, session_id: str) -> dict[str, Any]:
    """A v1 binding of ``session_id`` to the run."""
    return {
        "schema": "pi-workflows.session-binding.v1",
        "runId": run_id,
        "piSessionId": session_id,
        "boundAt": "2026-01-01T00:00:00.000Z",
    }


def session_events(first: int, count: int) -> list[dict[str, Any]]:
    """``count`` durable event records numbered from ``first``, each carrying its number."""
    return [
        {
            "seq": seq,
            "at": "2026-01-01T00:00:01.000Z",
            "type": "tool_execution_finished",
            "nodeId": "ask",
            "attemptId": "attempt-1",
            "payload": {"n": seq},
        }
        for seq in range(first, first + count)
    ]


def session_capture(status: str, entries: int, events: int, **extra: Any) -> dict[str, Any]:
    """A v1 capture with these counts (``extra`` adds e.g. failure details)."""
    return {
        "schema": "pi-workflows.session-capture.v1",
        "eventSchema": "pi-workflows.session-event.v1",
        "status": status,
        "entryCount": entries,
        "eventCount": events,
        **extra,
    }
