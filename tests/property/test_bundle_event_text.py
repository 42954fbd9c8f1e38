"""The export writes each bundle event around its payload's canonical text
(``bundle_event_text``): the bytes are exactly the canonical JSON of the whole event, and the
payload text parses back to what an offline checker reads from the line."""

from __future__ import annotations

from typing import Any

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.canonical import canonical_json
from runledger.infrastructure.audit.bundle_format import bundle_event_text

# Payloads as the export has them: parsed by orjson, so only what JSON text can hold.
_TEXT = st.one_of(
    st.text(
        st.one_of(
            st.characters(exclude_categories=["Cs"]),
            st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF),
            st.characters(min_codepoint=0x10000),
            st.sampled_from(["\u2028", '"', "\\", "\x00"]),
        ),
        max_size=8,
    ),
    # Text whose bytes look like a float JavaScript writes otherwise.
    st.sampled_from(["1.0,", "e-6]", "x.0}"]),
)
_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**64 - 1),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1.0, -0.0, 1e16, 1e-6, 1e21, 1e-7]),
    _TEXT,
)
_PAYLOADS = st.dictionaries(
    _TEXT,
    st.recursive(
        _SCALARS,
        lambda inner: st.one_of(
            st.lists(inner, max_size=3), st.dictionaries(_TEXT, inner, max_size=3)
        ),
        max_leaves=8,
    ),
    max_size=5,
)
_EVENTS = st.fixed_dictionaries(
    {
        "position": st.one_of(st.integers(1, 2**63 - 1), st.sampled_from([2**53 - 1, 2**53])),
        "wire_name": _TEXT,
        "aggregate_id": st.one_of(st.uuids().map(str), _TEXT),
        "version": st.integers(1, 2**31),
        "state": _PAYLOADS,
    }
)


@settings(max_examples=400)
@given(_EVENTS)
def test_the_event_text_is_the_canonical_json_of_the_event(event: dict[str, Any]) -> None:
    text, state = bundle_event_text(event)
    assert text == canonical_json(event).encode()
    assert state == canonical_json(event["state"]).encode()


@settings(max_examples=200)
@given(_EVENTS)
def test_the_payload_text_reads_back_as_the_lines_payload(event: dict[str, Any]) -> None:
    text, state = bundle_event_text(event)
    from_line = orjson.loads(text)["state"]
    from_text = orjson.loads(state)
    assert from_text == from_line
    assert orjson.dumps(from_text) == orjson.dumps(from_line)  # the same key order too
