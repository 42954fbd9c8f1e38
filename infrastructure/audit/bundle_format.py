"""The export bundle's format, shared by the writer (``bundle``) and the offline checker.

JSON lines, each one canonical JSON (``domain.canonical``):

1. ``{"kind": "header", ...}``: the format and its version, the run, whether its lineage is
   included and which runs that is, the runledger version that wrote it, the event catalogue
   (each wire name's class version and payload fields), the hash-chain definition, the number
   of events and, per aggregate, its first and last version in the bundle and its chain head.
2. One ``{"kind": "event", "event": {...}, "hash": h_n}`` per event in log order; ``event``
   holds position, wire name, aggregate id, version and the stored payload (``state``), and
   ``hash`` is the aggregate's chain link (``domain.audit_chain``).
3. ``{"kind": "digests", "read_models": {name: {"version", "digest" | "stalled"}}}``: what
   re-projecting exactly these events from scratch gives, digest by digest
   (``views.digest``), or where a model stalled.
"""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

import orjson

from runledger.domain.audit_chain import CHAIN_SEED
from runledger.domain.catalogue import DOMAIN_EVENTS
from runledger.domain.ports import LogEntry
from runledger.domain.serialisation import payload_fields

FORMAT: Final = "runledger-audit-bundle"
FORMAT_VERSION: Final = 1
EVENT_KEYS: Final = frozenset({"position", "wire_name", "aggregate_id", "version", "state"})
CHAIN: Final = {
    "algorithm": "sha256",
    "h0": f'sha256("{CHAIN_SEED}" || 0x00 || aggregate_id)',
    "link": "h_n = sha256(h_{n-1} || canonical_json(event_n)), hashes as lower-case hex text",
}


def catalogue() -> dict[str, dict[str, Any]]:
    """Each wire name -> its class version and the payload fields of that version."""
    return {
        event.TOPIC: {
            "class_version": getattr(event, "class_version", 1),
            "fields": sorted(payload_fields(event)),
        }
        for event in DOMAIN_EVENTS
    }


def store_version() -> str:
    """The version of the runledger distribution writing or checking a bundle."""
    try:
        return version("runledger")
    except PackageNotFoundError:
        return "unknown"


def entry_of(event: dict[str, Any]) -> LogEntry:
    """A bundle event as projections read it (the payload re-encoded as stored)."""
    return LogEntry(
        position=event["position"],
        topic=event["wire_name"],
        originator_id=event["aggregate_id"],
        originator_version=event["version"],
        state=orjson.dumps(event["state"]),
    )


def is_event_object(event: object) -> bool:
    """Whether a line's ``event`` has the fields and types of a bundle event."""
    return (
        isinstance(event, dict)
        and event.keys() == EVENT_KEYS
        and _is_int(event["position"])
        and _is_int(event["version"])
        and isinstance(event["wire_name"], str)
        and isinstance(event["aggregate_id"], str)
        and isinstance(event["state"], dict)
    )


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
