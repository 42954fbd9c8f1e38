"""One line per event saying what it changed, for the audit timeline.

One summariser per wire-name family (the part before the dot), each a table with one line of
text per wire name of its family; ``SUMMARIES`` joins them, and a test checks that it covers
the event catalogue exactly, so a new event cannot reach the timeline without a summary.
Values come from stored payloads (already decoded and checked), and are shown clipped.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Final

from runledger.domain.canonical import canonical_json

Payload = Mapping[str, Any]
Summary = Callable[[Payload], str]

WIDTH: Final = 60


def text(value: object, width: int = WIDTH) -> str:
    """A stored value on one line (JSON unless it is text), cut to ``width`` characters."""
    shown = value if isinstance(value, str) else canonical_json(value)
    flat = " ".join(shown.split())
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def _with(label: str, value: object) -> str:
    return "" if value is None else f", {label} {text(value)}"


RUN: Final[Mapping[str, Summary]] = {
    "run.created": lambda p: (
        f"created {text(p['workflow_name'])} as {p['status']}"
        + (
            ""
            if p["parent_run_id"] is None
            else f", {p['lineage_kind']} of {text(p['parent_run_id'])}"
        )
    ),
    "run.session-bound": lambda p: (
        f"bound to session {text(p['session_id'])} ({p['execution_mode']})"
    ),
    "run.progressed": lambda p: (
        f"{p['status']}{_with('at', p['current_node'])}{_with('on', p['waiting_on'])}"
    ),
    "run.paused": lambda p: f"paused{_with('detail', p['status_detail'])}",
    "run.resumed": lambda _: "resumed",
    "run.presentation-instructions-set": lambda p: (
        f"presentation instructions set: {text(p['instructions'])}"
    ),
    "run.follow-up-accepted": lambda p: f"accepted follow-up #{p['order']}",
    "run.finished": lambda p: (
        f"finished {p['status']}{_with('error', p['error'])}"
        + (", interrupted" if p["interrupted"] else "")
    ),
    "run.restart-child-created": lambda p: f"restart child {text(p['child_run_id'])} created",
    "run.continuation-ended": lambda p: (
        f"continuation {text(p['continuation_run_id'])} ended {p['status']}"
    ),
    "run.claimed": lambda p: (
        f"claimed by {text(p['owner_type'])}:{text(p['owner_id'])}, "
        f"generation {p['generation']}, until {p['expires_at']}"
    ),
    "run.claim-renewed": lambda p: (
        f"lease generation {p['generation']} renewed until {p['expires_at']}"
    ),
    "run.claim-released": lambda p: f"lease generation {p['generation']} released",
    "run.update-published": lambda p: (
        f"update {text(p['update_type'])}/{text(p['key'])} #{p['seq']}: {text(p['data'])}"
    ),
}

FOLLOW_UP: Final[Mapping[str, Summary]] = {
    "follow-up.queued": lambda p: (
        f"follow-up #{p['order']} queued for {text(p['target_session_id'])}: {text(p['prompt'])}"
    ),
    "follow-up.removed": lambda p: f"follow-up removed by {text(p['source'])}: {text(p['reason'])}",
    "follow-up.cancelled": lambda p: (
        f"follow-up cancelled: {text(p['ended_run_id'])} ended {p['status']}"
    ),
}

WORKFLOW_MESSAGE: Final[Mapping[str, Summary]] = {
    "workflow-message.created": lambda p: (
        f"{p['kind']} message for {text(p['target_session_id'])} (source {text(p['source_id'])})"
    ),
    "workflow-message.cancelled": lambda p: f"{p['kind']} message cancelled",
    "workflow-message.sent": lambda p: (
        f"{p['kind']} message sent as entry {text(p['pi_session_entry_id'])}"
    ),
}

WORKFLOW_TURN: Final[Mapping[str, Summary]] = {
    "workflow-turn.reserved": lambda p: f"turn {text(p['workflow_turn_id'])} reserved",
    "workflow-turn.started": lambda p: f"turn {text(p['workflow_turn_id'])} started",
    "workflow-turn.ended": lambda p: (
        f"turn {text(p['workflow_turn_id'])} ended: {p['stop_reason']}"
    ),
}

DECISION: Final[Mapping[str, Summary]] = {
    "decision.requested": lambda p: (
        f"decision at {text(p['node_id'])}/{text(p['attempt_id'])}: "
        f"{text(p['request'].get('title'))}"
    ),
    "decision.answer-submitted": lambda p: (
        f"answer {text(p['submission_id'])} {p['outcome']}: {text(p['response'])}"
    ),
    "decision.accepted": lambda p: f"accepted ({p['provenance']}): {text(p['response'])}",
    "decision.cancelled": lambda p: f"cancelled ({p['provenance']})",
    "decision.continuation-created": lambda p: f"continued in {text(p['continuation_run_id'])}",
}

SETTINGS: Final[Mapping[str, Summary]] = {
    "settings.scope-created": lambda p: (
        f"scope {text(p['scope_id'])} created: {text(p['settings'])}"
    ),
    "settings.changed": lambda p: (
        f"change #{p['change_number']} by {text(p['source'])} wrote "
        f"{text(', '.join(p['changed_paths']) or 'nothing')}: {text(p['settings'])}"
    ),
    "settings.scope-moved": lambda p: (
        f"scope {text(p['scope_id'])} moved here from {text(p['from_run_id'])}"
    ),
}

SESSION: Final[Mapping[str, Summary]] = {
    "session.segment-created": lambda p: (
        f"recording session {text(p['session_id'])}{_with('attempt', p['attempt_id'])}"
    ),
    "session.entry-appended": lambda p: f"entry #{p['entry_seq']} {text(p['entry_id'])}",
    "session.events-appended": lambda p: f"session events {p['first_seq']}-{p['last_seq']}",
    "session.capture-updated": lambda p: f"capture {text(p['capture'].get('status'))}",
}

EFFECT: Final[Mapping[str, Summary]] = {
    "effect.reserved": lambda p: (
        f"{text(p['effect_type'])} effect {text(p['key'])} reserved ({p['recovery']})"
    ),
    "effect.attempt-started": lambda p: f"attempt {p['attempt']} started",
    "effect.settled": lambda p: f"attempt {p['attempt']} {p['outcome']}: {text(p['result'])}",
    "effect.retry-ready": lambda p: f"attempt {p['attempt']} ready to retry: {text(p['reason'])}",
    "effect.ambiguous": lambda p: f"attempt {p['attempt']} ambiguous",
}

RUN_TREE: Final[Mapping[str, Summary]] = {
    "run-tree.archived": lambda p: (
        f"tree of {len(p['run_ids'])} run(s) archived: {p['events']} events to "
        f"{text(p['bundle'])} (sha256 {p['bundle_sha256']})"
    ),
    "run-tree.restored": lambda p: f"tree restored: {p['events']} events from {text(p['bundle'])}",
}

FAMILIES: Final[Mapping[str, Mapping[str, Summary]]] = {
    "run": RUN,
    "follow-up": FOLLOW_UP,
    "workflow-message": WORKFLOW_MESSAGE,
    "workflow-turn": WORKFLOW_TURN,
    "decision": DECISION,
    "settings": SETTINGS,
    "session": SESSION,
    "effect": EFFECT,
    "run-tree": RUN_TREE,
}

SUMMARIES: Final[Mapping[str, Summary]] = {
    wire_name: summary for family in FAMILIES.values() for wire_name, summary in family.items()
}


def summarise(wire_name: str, payload: Payload) -> str:
    """What the event changed, in one line."""
    return SUMMARIES[wire_name](payload)
