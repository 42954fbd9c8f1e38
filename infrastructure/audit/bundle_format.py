r"""The export bundle's format, shared by the writer (``bundle``) and the offline checker.

JSON lines, each one canonical JSON (``domain.canonical``) and ended by ``\n`` alone:

1. ``{"kind": "header", ...}``: the format and its version, the run, whether its lineage is
   included and which runs that is, the runledger version that wrote it, the event catalogue
   (each wire name's class version and payload fields), the hash-chain definition, the number
   of events, per aggregate its first and last version in the bundle (``aggregates``) and,
   apart, its chain head (``heads``).
2. One ``{"kind": "event", "event": {...}, "hash": h_n}`` per event in log order; ``event``
   holds position, wire name, aggregate id, version and the stored payload (``state``), and
   ``hash`` is the aggregate's chain link (``domain.audit_chain``). An aggregate's first line
   also carries ``"header"``: the header digest its chain was seeded with, so that a changed
   header is named as such rather than as an altered event.
3. ``{"kind": "digests", "read_models": {name: {"version", "digest" | "stalled"}}}``: what
   re-projecting exactly these events from scratch gives, digest by digest
   (``views.digest``), or where a model stalled.

The header digest is the SHA-256 of the header's canonical JSON without ``heads`` (the heads
depend on the seed, so they cannot be under it; the chains check them instead).

Canonical JSON writes U+2028, U+2029 and U+0085 unescaped, as upstream's does; a line is
nevertheless only ever ended by ``\n`` (JSON text escapes every control character below
U+0020, so ``\n`` never occurs inside a line), and the reader splits on ``\n`` alone. The
writer also writes those three as ``\u`` escapes, so tools that split on Unicode line breaks
(Python's ``str.splitlines``, some editors) still see one record a line; the hashes are over
the canonical JSON of the parsed values, which the escapes do not change.

Format 1 (bundles written before the header was bound) had the heads inside ``aggregates``,
no ``"header"`` on event lines and chains seeded by the aggregate alone: its bundles still
verify, but nothing binds their header.
"""

from __future__ import annotations

import functools
from importlib.metadata import PackageNotFoundError, version
from typing import Any, Final

import orjson

from runledger.domain.audit_chain import CHAIN_SEED, CHAIN_SEED_V1
from runledger.domain.canonical import json_digest, loaded_canonical_json
from runledger.domain.catalogue import DOMAIN_EVENTS
from runledger.domain.json_strings import json_string
from runledger.domain.ports import LogEntry
from runledger.domain.serialisation import payload_fields

FORMAT: Final = "runledger-audit-bundle"
FORMAT_VERSION: Final = 2
EVENT_KEYS: Final = frozenset({"position", "wire_name", "aggregate_id", "version", "state"})
LINE_KEYS: Final = frozenset({"kind", "event", "hash"})
FIRST_LINE_KEYS: Final = LINE_KEYS | {"header"}
"""An aggregate's first event line also names the header digest its chain starts from."""
DIGEST_KEYS: Final = frozenset({"kind", "read_models"})
HEADS: Final = "heads"
_LINK: Final = "h_n = sha256(h_{n-1} || canonical_json(event_n)), hashes as lower-case hex text"
CHAINS: Final = {
    1: {
        "algorithm": "sha256",
        "h0": f'sha256("{CHAIN_SEED_V1}" || 0x00 || aggregate_id)',
        "link": _LINK,
    },
    2: {
        "algorithm": "sha256",
        "h0": f'sha256("{CHAIN_SEED}" || 0x00 || header_digest || 0x00 || aggregate_id)',
        "header_digest": f'sha256(canonical_json(header without "{HEADS}"))',
        "link": _LINK,
    },
}
"""The hash-chain definition each readable format version declares in its header."""
CHAIN: Final = CHAINS[FORMAT_VERSION]
# Unicode line breaks that JSON leaves unescaped: written escaped (see the module docstring).
_LINE_BREAKS: Final = {0x2028: "\\u2028", 0x2029: "\\u2029", 0x85: "\\u0085"}


def catalogue() -> dict[str, dict[str, Any]]:
    """Each wire name -> its class version and the payload fields of that version."""
    return {
        event.TOPIC: {
            "class_version": getattr(event, "class_version", 1),
            "fields": sorted(payload_fields(event)),
        }
        for event in DOMAIN_EVENTS
    }


@functools.cache
def store_version() -> str:
    """The version of the runledger distribution writing or checking a bundle (read once:
    the metadata lookup scans the installed distributions, milliseconds a bundle)."""
    try:
        return version("runledger")
    except PackageNotFoundError:
        return "unknown"


def header_digest(header: dict[str, Any]) -> str:
    """The digest a format-2 header seeds its chains with: everything but the heads."""
    return json_digest({key: value for key, value in header.items() if key != HEADS})


def line_text(canonical: str) -> str:
    """A canonical JSON line as written: Unicode line breaks escaped (same parsed value)."""
    return canonical if canonical.isascii() else canonical.translate(_LINE_BREAKS)


def bundle_event_text(event: dict[str, Any]) -> tuple[bytes, bytes]:
    """The canonical JSON of a bundle event and of its payload (``state``), as UTF-8.

    The payload is canonicalised once and the event's other fields written around it, in the
    order canonical JSON sorts them (``aggregate_id``, ``position``, ``state``, ``version``,
    ``wire_name``): the export needs both texts, the payload's to re-project what the bundle
    holds. ``event`` is as the export builds it: text, integers and a payload orjson parsed.
    """
    state = loaded_canonical_json(event["state"])
    position, version = event["position"], event["version"]
    if not (_is_safe_int(position) and _is_safe_int(version)):
        return loaded_canonical_json(event), state
    return (
        b'{"aggregate_id":%s,"position":%d,"state":%s,"version":%d,"wire_name":%s}'
        % (
            json_string(event["aggregate_id"]).encode(),
            position,
            state,
            version,
            json_string(event["wire_name"]).encode(),
        ),
        state,
    )


def _is_safe_int(value: object) -> bool:
    # JavaScript writes integers from 2**53 on as the double they round to (canonical.py).
    return type(value) is int and -(2**53) < value < 2**53


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
