"""The JSON API as one table: each row maps an HTTP method and path to a store method.

Arguments come from the path (``{name}`` is the argument of that name; ``{name:path}`` may
hold slashes, as a settings scope id with a nested mount path does), then from the query
string (GET) or the JSON body object (POST), by argument name; bodies and queries are
validated against the store method's own signature (see ``binding``). Adding a store method
to the API is one row here; ``UNROUTED`` names, with a reason, the public store methods that
deliberately have none (a test checks that every one of them is in one of the two).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Literal

from runledger.domain import errors
from runledger.domain.errors import WorkflowError

Method = Literal["GET", "POST"]


@dataclass(frozen=True)
class Route:
    """One row of the API: ``method path`` calls ``store.<call>``."""

    method: Method
    path: str
    call: str
    missing: Callable[..., WorkflowError] | None = None
    """For a lookup answering None for an unknown id: the error to answer with instead
    (404), built from the path's values in order."""
    requires: frozenset[str] = field(default_factory=frozenset)
    """Query parameters that must be present for this row to answer; rows sharing a method and
    path are tried in table order (``?start&limit`` picks the ranged queue)."""
    creates: bool = False
    """A POST naming a new resource (a run, a follow-up, a message, ...): it answers 201, also
    when an idempotent repeat answers the one created before (DESIGN decision 29)."""

    @property
    def status(self) -> int:
        """The HTTP status of a successful answer."""
        return CREATED if self.creates else OK


OK: Final = 200
CREATED: Final = 201


def _get(path: str, call: str, *, missing: Callable[..., WorkflowError] | None = None) -> Route:
    return Route("GET", path, call, missing=missing)


def _post(path: str, call: str, *, creates: bool = False) -> Route:
    return Route("POST", path, call, creates=creates)


ROUTES: Final[Sequence[Route]] = (
    # -- runs -----------------------------------------------------------------------------
    _post("/runs", "create_run", creates=True),
    _get("/runs", "list_runs"),
    _get("/runs/{run_id}", "get_run", missing=errors.RunNotFoundError),
    _post("/runs/{run_id}/session", "bind_origin_session"),
    _post("/runs/{run_id}/progress", "record_progress"),
    _post("/runs/{run_id}/pause", "pause_run"),
    _post("/runs/{run_id}/resume", "resume_run"),
    _post("/runs/{run_id}/presentation-instructions", "set_presentation_instructions"),
    _post("/runs/{run_id}/finish", "finish_run"),
    _post("/runs/{run_id}/interrupt", "interrupt_run"),
    _post("/runs/{source_run_id}/restart", "restart_run", creates=True),
    _post("/runs/{run_id}/updates", "publish_update"),
    _get("/runs/{run_id}/terminal-data", "terminal_data"),
    _get("/runs/{run_id}/viewer-deltas", "viewer_deltas"),
    # -- follow-ups -----------------------------------------------------------------------
    _post("/runs/{run_id}/follow-ups", "queue_follow_up", creates=True),
    _post("/runs/{run_id}/follow-ups/{follow_up_id}/remove", "remove_follow_up"),
    _get("/follow-ups/{follow_up_id}", "get_follow_up", missing=errors.FollowUpNotFoundError),
    Route(
        "GET",
        "/runs/{run_id}/follow-up-queue",
        "follow_up_queue_range",
        requires=frozenset({"start", "limit"}),
    ),
    _get("/runs/{run_id}/follow-up-queue", "follow_up_queue"),
    # -- workflow messages, turns and the session outbox --------------------------------
    _post("/runs/{run_id}/workflow-messages", "create_workflow_message", creates=True),
    _get(
        "/workflow-messages/{workflow_message_id}",
        "get_workflow_message",
        missing=errors.MessageNotFoundError,
    ),
    _post("/sessions/{session_id:path}/branch", "report_branch"),
    _get("/sessions/{session_id:path}/outbox", "session_outbox"),
    _get("/sessions/{session_id:path}/next-deliverable", "next_deliverable"),
    _post("/workflow-messages/{workflow_message_id}/turns", "start_turn", creates=True),
    _post("/turns/{workflow_turn_id}/end", "end_turn"),
    _get("/turns/{workflow_turn_id}", "get_turn", missing=errors.TurnNotFoundError),
    # -- settings -------------------------------------------------------------------------
    _post("/runs/{run_id}/settings-scopes", "ensure_settings_scope", creates=True),
    _get("/runs/{run_id}/settings-scopes", "settings_scopes"),
    _post("/runs/{run_id}/settings-scopes/{scope_id:path}/changes", "change_settings"),
    _get(
        "/settings-scopes/{scope_id:path}/changes/{change_number}",
        "settings_scope_at_change",
        missing=lambda scope_id, number: errors.SettingsChangeMissingError(
            change_number=number, scope_id=scope_id
        ),
    ),
    # -- human decisions ------------------------------------------------------------------
    _post("/runs/{run_id}/decisions", "request_human_decision", creates=True),
    _get("/decisions/{decision_id}", "get_human_decision", missing=errors.DecisionNotFoundError),
    _post("/decisions/{decision_id}/answers", "answer_human_decision"),
    _post("/decisions/{decision_id}/timeout", "apply_decision_timeout"),
    _post("/decisions/{decision_id}/cancel", "cancel_human_decision"),
    _post("/decisions/{decision_id}/continuation", "continue_after_decision", creates=True),
    # -- run leases -----------------------------------------------------------------------
    _post("/runs/{run_id}/claims", "claim_run"),
    _post("/claims/renew", "renew_claim"),
    _post("/claims/release", "release_claim"),
    # -- session recording ----------------------------------------------------------------
    _post("/runs/{run_id}/session-segments", "record_session_binding", creates=True),
    _get("/runs/{run_id}/session-segments", "session_segments"),
    _post("/runs/{run_id}/session-entries", "append_session_entry"),
    _get("/runs/{run_id}/session-entries", "session_entries"),
    _post("/runs/{run_id}/session-events", "append_session_events"),
    _get("/runs/{run_id}/session-events", "session_events"),
    _post("/runs/{run_id}/session-capture", "update_session_capture"),
    # -- managed effects ------------------------------------------------------------------
    _post("/runs/{run_id}/effects", "reserve_effect", creates=True),
    _post("/runs/{run_id}/effects/recover", "recover_applying_effects"),
    _get("/effects/{effect_id}", "get_effect", missing=errors.EffectNotFoundError),
    _post("/effects/{effect_id}/settle", "settle_effect"),
    _post("/effects/{effect_id}/retry", "retry_effect"),
    # -- the event log and the projections ------------------------------------------------
    _get("/events", "event_log"),
    _get("/runs/{run_id}/audit", "audit_run"),
    _get("/runs/{run_id}/verification", "verify_run"),
    _get("/projections", "projection_status"),
    _get("/projections/names", "projection_names"),
    _get("/projections/{name}/digest", "read_model_digest"),
)

UNROUTED: Final[Mapping[str, str]] = {
    "close": "the server owns the store: it closes it when it stops",
    "export_run": "it writes a file on the server's disk; a client reads the same history "
    "from GET /runs/{run_id}/audit, or runs `runledger audit --export` where the file belongs",
    "rebuild_projection": "an operator's offline action (`runledger projections rebuild`); "
    "it drops a view and replays the whole log, not a call for API clients",
    "position_token": "every API call goes through the server's one store, which reads its "
    "own writes already; a token is for hosts that each open a store of their own",
    "reading_after": "every API call goes through the server's one store, which reads its "
    "own writes already; a token is for hosts that each open a store of their own",
    "prune_runs": "an operator's action that writes bundles to the server's disk and deletes "
    "history (`runledger prune`), not a call for API clients",
    "restore_runs": "an operator's action that reads a bundle from the server's disk "
    "(`runledger restore`), not a call for API clients",
}
"""Public store methods with no route, and why."""


__all__: Sequence[str] = ["ROUTES", "UNROUTED", "Route"]
