"""Run leases: the values and argument checks of claims (upstream §3.10, §8.3, decision 16).

The lease itself lives on the ``Run`` aggregate (``run.claimed``, ``run.claim-renewed``,
``run.claim-released``); the fencing rule is ``Run.fence``. This module holds what the
commands check before they load anything: durations, owners, claims and authorities.
"""

from __future__ import annotations

import secrets
from datetime import datetime, timedelta
from typing import Final

from runledger.domain.canonical import sha256hex
from runledger.domain.errors import (
    AuthorityLeaseDurationError,
    InvalidClaimError,
    InvalidLeaseOwnerError,
    LeaseDurationError,
    LeaseTooLongError,
    WorkflowError,
)
from runledger.domain.records import RunClaim
from runledger.domain.values import ACTOR_TYPES, Actor

DEFAULT_LEASE_MS: Final = 30000
TOKEN_BYTES: Final = 32


MAX_LEASE_MS: Final = 366 * 24 * 60 * 60 * 1000
"""A lease (and a write's renewal) lasts at most a year: an expiry must be a real date."""


def _positive_integer(value: object, error: type[WorkflowError]) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise error()
    if value > MAX_LEASE_MS:
        # Upstream's JavaScript clock would overflow too; here the expiry date would.
        raise LeaseTooLongError(limit=MAX_LEASE_MS)
    return value


def check_lease_ms(lease_ms: object) -> int:
    """``claim_run`` and ``renew_claim``: ``Lease duration must be a positive integer``."""
    return _positive_integer(lease_ms, LeaseDurationError)


def check_authority_lease_ms(lease_ms: object) -> int:
    """A write's authority renews by its own duration, checked with upstream's other text."""
    return _positive_integer(lease_ms, AuthorityLeaseDurationError)


def check_owner(owner_type: object, owner_id: object) -> Actor:
    """A lease is held by an actor with a known type and a non-empty id."""
    if owner_type not in ACTOR_TYPES or not isinstance(owner_id, str) or not owner_id.strip():
        raise InvalidLeaseOwnerError()
    return Actor.coerce({"type": owner_type, "id": owner_id})


def check_claim(claim: object) -> RunClaim:
    """A claim argument is a ``RunClaim`` (as ``claim_run`` returned it)."""
    if not isinstance(claim, RunClaim):
        raise InvalidClaimError()
    return claim


def check_authority(authority: object) -> RunClaim | None:
    """A fenced write's ``authority``: a ``RunClaim``, or None for a run nobody claimed."""
    return None if authority is None else check_claim(authority)


def new_token() -> str:
    """A random 32-byte base64url token, as upstream draws it."""
    return secrets.token_urlsafe(TOKEN_BYTES)


def token_hash(token: str) -> str:
    """What events store instead of the token (decision 16)."""
    return sha256hex(token)


def expiry(now: datetime, lease_ms: int) -> datetime:
    """When a lease taken or renewed at ``now`` for ``lease_ms`` runs out."""
    return now + timedelta(milliseconds=lease_ms)
