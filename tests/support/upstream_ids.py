"""Ids the upstream host derives that runledger never computes itself: the tests pin them
beside ours so an audit can match a runledger store against an upstream one."""

from __future__ import annotations

from runledger.domain.canonical import sha256hex


def resource_id_for(resource_type: str, aggregate_key: str) -> str:
    """Upstream's resource id of an aggregate."""
    return f"{resource_type}-" + sha256hex(f"{resource_type}\0{aggregate_key}")[:40]


def session_request_id(client_id: str, idempotency_key: str) -> str:
    """The request id the upstream host derives for a Pi session's follow-up command."""
    return "session-" + sha256hex(f"{client_id}\0{idempotency_key}")
