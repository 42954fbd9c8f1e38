"""Canonical JSON through orjson is byte-identical to the rule-by-rule writer, or not taken.

Message ids and digests derive from these bytes, so the fast paths (``canonical_json``'s and
``loaded_canonical_json``'s) may only ever answer what the JavaScript rules (``_written``)
answer: the properties cover the cases where orjson would differ (floats that JavaScript
writes otherwise, -0, big integers, keys ordered by UTF-16 code units, lone surrogates) and
the values orjson writes although upstream refuses them (UUIDs, enums, NaN).
"""

from __future__ import annotations

import enum
import math
import uuid
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.canonical import (
    _orjson_canonical,
    _orjson_text,
    _written,
    canonical_json,
    json_digest,
    loaded_canonical_json,
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
# Floats at every decimal exponent, integral ones and those beside the exponents where
# orjson's and JavaScript's notations part (1e16..1e21, 1e-6, 1e-7) made likely.
_DECIMAL_FLOATS = st.builds(
    lambda digits, exponent, sign: sign * digits * 10.0**exponent,
    st.integers(min_value=1, max_value=10**17),
    st.integers(min_value=-30, max_value=30),
    st.sampled_from([1, -1]),
)
_NUMBERS = st.one_of(
    st.integers(min_value=-(2**64), max_value=2**64),
    st.sampled_from(
        [2**53 - 1, 2**53, -(2**53), 0, -0.0, 0.0, 1.0, 1e21, 1e-7, 5e-324, 1e16, 1e20, 1e-6]
    ),
    st.floats(allow_nan=False, allow_infinity=False),
    _DECIMAL_FLOATS,
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


@settings(max_examples=600)
@given(_JSON)
def test_the_loaded_path_gives_the_reference_bytes(value: Any) -> None:
    # The strategy's values are of exact plain types with finite floats, as orjson.loads
    # returns them (tuples aside, which both writers treat as lists).
    reference = _reference(value)
    if isinstance(reference, str):
        assert loaded_canonical_json(value) == reference.encode("utf-8")
    else:
        with pytest.raises(reference):
            loaded_canonical_json(value)


@settings(max_examples=300)
@given(
    st.dictionaries(
        st.text(alphabet="a\ud7ff\ue000\uffff\U00010000\U0001f600", max_size=3),
        st.integers(min_value=0, max_value=9),
        max_size=5,
    )
)
def test_keys_whose_utf16_and_code_point_orders_part_are_sorted_the_javascript_way(
    value: dict[str, int],
) -> None:
    expected = _written(value).encode()
    assert canonical_json(value).encode() == expected
    assert loaded_canonical_json(value) == expected


@settings(max_examples=600)
@given(st.lists(_NUMBERS, min_size=1, max_size=3))
def test_floats_in_orjson_text_are_javascripts_or_refused(numbers: list[Any]) -> None:
    fast = _orjson_text(numbers)
    if fast is not None:
        assert fast == _written(numbers).encode()


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
        [1.0],
        {"a": -0.0},
        [1e16],
        {"b": [2.5e20]},
        [1e-6],
        [3e-6, 1],
    ],
)
def test_values_orjson_would_write_differently_take_the_reference_path(value: Any) -> None:
    assert _orjson_canonical(value) is None
    assert _orjson_text(value) is None


class _Colour(enum.Enum):
    RED = 1


class _Level(enum.IntEnum):
    LOW = 1


class _Name(str):
    pass


@pytest.mark.parametrize(
    "value",
    [
        [uuid.UUID(int=1)],
        {"colour": _Colour.RED},
        [_Level.LOW],
        {"name": _Name("x")},
        [math.nan],
        {"far": math.inf},
        [orjson.Fragment(b"1")],
    ],
)
def test_values_orjson_writes_but_upstream_refuses_take_the_reference_path(value: Any) -> None:
    assert _orjson_canonical(value) is None
    reference = _reference(value)
    if isinstance(reference, str):
        assert canonical_json(value) == reference
    else:
        with pytest.raises(reference):
            canonical_json(value)


@pytest.mark.parametrize(
    "value",
    [
        {"share": 0.5, "tiny": 1e-7, "huge": 1e21, "small": 0.000015, "big": 123456.75},
        {"caf\u00e9": "cr\u00e8me", "\ue000": "a private-use key"},
    ],
)
def test_floats_javascript_writes_alike_and_bmp_keys_take_the_fast_path(value: Any) -> None:
    expected = _written(value).encode()
    assert _orjson_canonical(value) == expected
    assert _orjson_text(value) == expected


def test_text_that_looks_like_a_float_is_only_scanned_when_floats_may_be_there() -> None:
    value = {"note": "version 1.0, then e-6]"}
    # canonical_json's walk saw no float, so orjson's bytes are taken as they are; the loaded
    # path cannot tell the text from a number and asks the reference writer.
    assert _orjson_canonical(value) == _written(value).encode()
    assert _orjson_text(value) is None
    assert loaded_canonical_json(value) == _written(value).encode()


def test_a_follow_up_content_takes_the_fast_path() -> None:
    content = {"kind": "followUp", "prompt": "check the edge cases", "order": 3, "tags": []}
    assert _orjson_canonical(content) == _written(content).encode()
