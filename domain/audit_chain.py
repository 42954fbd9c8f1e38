"""The per-aggregate hash chain of an audit bundle (DESIGN.md "Audit").

For the events of one aggregate in a bundle, in version order:

    h_0 = sha256("runledger-audit-chain-v2" || 0x00 || header_digest || 0x00 || aggregate_id)
    h_n = sha256(h_{n-1} || canonical_json(event_n))

where hashes are lower-case hex text, ``||`` joins UTF-8 bytes, ``header_digest`` is the
SHA-256 of the bundle header's canonical JSON without its chain heads, ``aggregate_id`` is the
aggregate's UUID in its canonical 36-character form and ``event_n`` is the bundle line's
``event`` object (position, wire name, aggregate id, version and the stored payload). Seeding
each chain with its aggregate id means a chain cannot be moved to another aggregate; seeding
it with the header means the header (run, runs, runledger version, catalogue, counts) cannot
be changed without rewriting every chain.

Bundles of format 1 seeded the chain with the aggregate alone
(``sha256("runledger-audit-chain-v1" || 0x00 || aggregate_id)``); they are still read.
"""

from __future__ import annotations

from typing import Final

from runledger.domain.canonical import sha256hex

CHAIN_SEED: Final = "runledger-audit-chain-v2"
CHAIN_SEED_V1: Final = "runledger-audit-chain-v1"


def chain_start(aggregate_id: str, header_digest: str) -> str:
    """``h_0`` of the aggregate's chain in a bundle whose header has ``header_digest``."""
    return sha256hex(f"{CHAIN_SEED}\0{header_digest}\0{aggregate_id}")


def chain_start_v1(aggregate_id: str) -> str:
    """``h_0`` of the aggregate's chain in a bundle of format 1 (its header is not bound)."""
    return sha256hex(f"{CHAIN_SEED_V1}\0{aggregate_id}")


def chain_link(previous: str, canonical_event: str | bytes) -> str:
    """``h_n`` from ``h_{n-1}`` and the canonical JSON of event n (text, or its UTF-8)."""
    if isinstance(canonical_event, str):
        return sha256hex(previous + canonical_event)
    return sha256hex(previous.encode() + canonical_event)
