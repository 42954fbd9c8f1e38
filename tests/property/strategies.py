"""Hostile values: what a careless or malicious host could pass to any argument."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from runledger.domain.values import (
    MAX_ARGUMENT_TEXT_BYTES,
    MAX_ARGUMENT_VALUES,
    MAX_JSON_DEPTH,
    Actor,
)

NASTY_CHARACTERS = ["\ud800", "\udfff", "\udc80", "\x00", "\ufeff", "\u2028", "\U0010ffff"]

characters = st.one_of(
    # Every code point, lone surrogates and NUL included (the default alphabet skips them).
    st.characters(codec=None, exclude_categories=()),
    st.sampled_from(NASTY_CHARACTERS),
)
texts = st.text(characters, max_size=40)
clean_texts = st.text(
    st.characters(exclude_categories=["Cs"], exclude_characters="\x00"), max_size=40
)
huge_texts = st.builds(
    lambda unit, count: unit * count,
    st.sampled_from(["a", "é", "\U0001f600", "x\ud800", " "]),
    st.sampled_from([70_000, MAX_ARGUMENT_TEXT_BYTES // 4 + 1, MAX_ARGUMENT_TEXT_BYTES + 1]),
)
big_integers = st.one_of(
    st.integers(),
    st.sampled_from([2**53 + 1, 2**63, -(2**63) - 1, 2**64, 2**100, -(10**4000)]),
)
floats = st.floats(allow_nan=True, allow_infinity=True)
scalars = st.one_of(st.none(), st.booleans(), big_integers, floats, texts)
json_values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(texts, inner, max_size=4)),
    max_leaves=12,
)


def _nested(depth: int, leaf: Any, as_object: bool) -> Any:
    value = leaf
    for _ in range(depth):
        value = {"k": value} if as_object else [value]
    return value


deep_values = st.builds(
    _nested,
    st.sampled_from([MAX_JSON_DEPTH, MAX_JSON_DEPTH + 1, 300, 2000, 5000]),
    scalars,
    st.booleans(),
)
huge_values = st.sampled_from(
    [
        [0] * (MAX_ARGUMENT_VALUES + 1),
        {str(index): index for index in range(MAX_ARGUMENT_VALUES // 2 + 1)},
        ["x" * 1000] * (MAX_ARGUMENT_TEXT_BYTES // 1000 + 1),
    ]
)


class Opaque:
    """An object no rule knows."""


def _self_containing() -> list[Any]:
    loop: list[Any] = []
    loop.append(loop)
    return loop


strange_objects = st.one_of(
    st.binary(max_size=8),
    st.builds(Opaque),
    st.builds(_self_containing),
    st.sets(st.integers(), max_size=3),
    st.builds(lambda: iter(["m", "e"])),
    st.builds(Actor, st.sampled_from(["session", "human"]), st.none() | texts),
    st.dictionaries(big_integers | floats, scalars, min_size=1, max_size=2),
)
wrong_values = st.recursive(
    scalars | strange_objects,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.tuples(inner, inner),
        st.dictionaries(texts, inner, max_size=3),
    ),
    max_leaves=8,
)
hostile_values = st.one_of(
    texts, huge_texts, json_values, deep_values, huge_values, wrong_values, big_integers, floats
)
"""Anything at all, weighted towards what once escaped as a non-domain error."""
