"""Canonical JSON through orjson is byte-identical to the rule-by-rule writer, or not taken.

Message ids and digests derive from these bytes, so the fast path may only ever answer what
the JavaScript rules (``_written``) answer: the property covers the cases where orjson would
differ (floats, -0, big integers, keys ordered by UTF-16 code units, lone surrogates).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.canonical import (
    _orjson_canonical,
    _written,
    canonical_json,
    json_digest,
    sha256hex,
)
from runledger.domain.errors import WorkflowError

# Text from every plane, lone surrogates and the characters whose UTF-16 and code point
# orders disagree (U+E000..U+FFFF against astral characters) made likely.
_TEXT = st.text(
    alphabet=st.one_of(
        st.characters(codec=None),
        st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF),
        st.characters(min_codepoint=0xE000, max_codepoint=0xFFFF),
        st.characters(min_codepoint=0x10000),
        st.sampled_from('"\\\x00\x1f\x7f\u2028\u2029/'),
    ),
    max_size=8,
)
_NUMBERS = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from([2**53 - 1, 2**53, -(2**53), 0, -0.0, 0.0, 1.0, 1e21, 1e-7, 5e-324]),
    st.floats(allow_nan=False, allow_infinity=False),
)
_SCALARS = st.one_of(st.none(), st.booleans(), _NUMBERS, _TEXT)
_JSON = st.recursive(
    _SCALARS,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.lists(children, max_size=3).map(tuple),
        st.dictionaries(_TEXT, children, max_size=4),
    ),
    max_leaves=12,
)


def _reference(value: Any) -> str | type[WorkflowError]:
    try:
        return _written(value)
    except WorkflowError as error:
        return type(error)


@settings(max_examples=600)
@given(_JSON)
def test_the_fast_path_gives_the_reference_bytes_or_steps_aside(value: Any) -> None:
    fast = _orjson_canonical(value)
    reference = _reference(value)
    if fast is not None:
        assert isinstance(reference, str)
        assert fast == reference.encode("utf-8")


@settings(max_examples=300)
@given(_JSON)
def test_canonical_json_and_its_digest_match_the_reference(value: Any) -> None:
    reference = _reference(value)
    if isinstance(reference, str):
        assert canonical_json(value) == reference
        assert json_digest(value) == sha256hex(reference)
    else:
        with pytest.raises(reference):
            canonical_json(value)


@pytest.mark.parametrize(
    "value",
    [
        {"\ue000": 1, "\U0001f600": 2},  # UTF-16 puts the astral key first
        1.0,
        -0.0,
        2**53,
        "\ud800",
        {1: "not a text key"},
    ],
)
def test_values_orjson_would_write_differently_take_the_reference_path(value: Any) -> None:
    assert _orjson_canonical(value) is None


def test_a_follow_up_content_takes_the_fast_path() -> None:
    content = {"kind": "followUp", "prompt": "check the edge cases", "order": 3, "tags": []}
    assert _orjson_canonical(content) == _written(content).encode()
