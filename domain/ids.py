"""Deterministic identifiers: upstream's natural ids and our aggregate UUIDs.

Natural ids follow upstream-behaviour §4.2, §5.1 and §3.8 byte for byte; aggregate ids are
``uuid5(NAMESPACE_URL, "runledger:<kind>:<natural id>")`` so an auditor can compute them.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Final, Literal
from uuid import NAMESPACE_URL, UUID, uuid5

from runledger.domain.canonical import canonical_json, sha256hex

AggregateKind = Literal[
    "run",
    "follow-up",
    "workflow-message",
    "workflow-turn",
    "decision",
    "settings",
    "effect",
    "segment",
    "run-tree-archive",
]

FOLLOW_UP_MESSAGE_KEY: Final[str] = "initial"


def aggregate_id(kind: AggregateKind, natural_id: str) -> UUID:
    """The aggregate UUID of a natural id."""
    if type(natural_id) is str:
        return _cached_aggregate_id(kind, natural_id)
    return uuid5(NAMESPACE_URL, f"runledger:{kind}:{natural_id}")


@lru_cache(maxsize=4096)
def _cached_aggregate_id(kind: AggregateKind, natural_id: str) -> UUID:
    # A command derives the same few ids several times (its run's, its session's), and a
    # SHA-1 with a UUID built around it cost a tenth of a 1 ms command; UUIDs are
    # immutable, so one may be shared.
    return uuid5(NAMESPACE_URL, f"runledger:{kind}:{natural_id}")


def follow_up_id_for(run_id: str, request_id: str) -> str:
    return "follow-up-" + sha256hex(f"{run_id}\0{request_id}")[:40]


def workflow_message_id_for(kind: str, source_id: str, idempotency_key: str) -> str:
    identity = {"kind": kind, "sourceId": source_id, "idempotencyKey": idempotency_key}
    return "workflow-message-" + sha256hex(canonical_json(identity))


def follow_up_message_id(follow_up_id: str) -> str:
    return workflow_message_id_for("followUp", follow_up_id, FOLLOW_UP_MESSAGE_KEY)


def terminal_source_id(run_id: str) -> str:
    return f"terminal:{run_id}"


def terminal_message_id(run_id: str, terminal_fingerprint: str) -> str:
    return workflow_message_id_for("terminal", terminal_source_id(run_id), terminal_fingerprint)


def restart_run_id(workflow_message_id: str) -> str:
    return "restart-" + sha256hex(workflow_message_id)[:40]


def default_turn_id(workflow_message_id: str, turn_number: int) -> str:
    """A turn id for callers that do not bring their own; stable for a message's n-th turn."""
    return "workflow-turn-" + sha256hex(f"{workflow_message_id}\0{turn_number}")[:40]


def decision_subject(run_id: str, node_id: str, attempt_id: str) -> dict[str, str]:
    """What a human decision is about: one attempt of one node of a run (decision 20)."""
    return {"attemptId": attempt_id, "nodeId": node_id, "runId": run_id}


def decision_id_for(run_id: str, node_id: str, attempt_id: str) -> str:
    """One decision per node attempt: ``decision-`` + 40 hex of the subject's digest."""
    subject = canonical_json(decision_subject(run_id, node_id, attempt_id))
    return "decision-" + sha256hex(subject)[:40]


def continuation_run_id_for(decision_id: str) -> str:
    """The continuation child an accepted decision leads to (upstream §9.3)."""
    return "continuation-" + decision_id.removeprefix("decision-")
