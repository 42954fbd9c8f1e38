"""The door's quick check of a large unsized argument (orjson and its brackets) agrees with
the walk over every value: it only ever answers "storable" where the walk finds nothing."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.arguments import _problem, _surely_storable, _walked_problem
from runledger.domain.values import MAX_JSON_DEPTH

TEXT = st.text(
    alphabet=st.sampled_from(["a", '"', "\\", "[", "]", "{", "}", "\x00", "\ud800", "é", "u", "0"]),
    max_size=8,
)
"""Texts made of what the check reads: quotes, backslashes, brackets, NUL, a lone surrogate."""


@dataclass
class Holder:
    text: str


def _nested(depth: int, leaf: Any) -> Any:
    for index in range(depth):
        leaf = [leaf] if index % 2 else {"k": leaf}
    return leaf


LEAVES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(), TEXT, st.builds(Holder, TEXT)
)
VALUES = st.recursive(
    LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.tuples(children, children),
        st.dictionaries(TEXT, children, max_size=4),
        st.frozensets(st.text(max_size=2), max_size=2),
    ),
    max_leaves=20,
)
DEEP = st.builds(
    _nested, st.integers(MAX_JSON_DEPTH - 3, MAX_JSON_DEPTH + 3), st.one_of(TEXT, st.none())
)


@settings(max_examples=600)
@given(st.one_of(st.lists(VALUES, max_size=3), st.dictionaries(TEXT, VALUES), DEEP))
def test_the_quick_check_never_passes_what_the_walk_refuses(value: Any) -> None:
    walked = _walked_problem(value, sized=False)

    if _surely_storable(value):
        assert walked is None
    assert _problem(value, sized=False) == walked


def test_the_quick_check_proves_plain_records_at_the_depth_limit_and_no_deeper() -> None:
    records = [{"seq": n, "payload": {"text": 'say "[hi]" \\ ok'}} for n in range(64)]

    assert _surely_storable(records)
    assert _surely_storable(_nested(MAX_JSON_DEPTH, "x"))
    assert not _surely_storable(_nested(MAX_JSON_DEPTH + 1, "x"))
    assert not _surely_storable([{"text": "a\x00b"}])
    assert not _surely_storable([{"text": "\ud800"}])
