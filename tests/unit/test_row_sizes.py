"""A runner's cache bound in bytes: rows are weighed by sampling their JSON, and the tables
heaviest in bytes give rows up first."""

from __future__ import annotations

import math
from uuid import UUID

from runledger.infrastructure.views.row_sizes import (
    SAMPLE_EVERY,
    UNMEASURABLE_BYTES,
    RowSizes,
    json_size,
)


def test_a_row_weighs_the_length_of_its_json() -> None:
    assert json_size({"id": "a", "n": 1}) == len(b'{"id":"a","n":1}')
    # Values JSON has no form for are weighed by their text, not refused.
    assert json_size({"id": UUID(int=1)}) > len(b'{"id":""}')
    assert json_size({"nested": {1: "one"}}) == len(b'{"nested":{"1":"one"}}')


def test_a_row_json_cannot_hold_gets_a_fixed_weight() -> None:
    assert json_size({"n": 1 << 70}) == UNMEASURABLE_BYTES


def test_the_first_row_of_a_table_and_then_one_in_sample_every_are_weighed() -> None:
    sizes = RowSizes(limit=1_000)
    sizes.kept("big", {"text": "x" * 100})
    first = sizes.weights["big"]
    for _ in range(SAMPLE_EVERY - 1):
        # Not weighed: a heavier row between two samples leaves the weight as it was.
        sizes.kept("big", {"text": "x" * 10_000})
    assert sizes.weights["big"] == first

    sizes.kept("big", {"text": "x" * 10_000})

    assert first < sizes.weights["big"] < json_size({"text": "x" * 10_000})
    assert sizes.heaviest == sizes.weights["big"]


def _weighed(weights: dict[str, int], limit: int) -> RowSizes:
    sizes = RowSizes(limit)
    for name, size in weights.items():
        sizes.kept(name, {"v": "x" * (size - len(b'{"v":""}'))})
    assert {name: round(weight) for name, weight in sizes.weights.items()} == weights
    return sizes


def test_nothing_is_evicted_within_the_limit() -> None:
    sizes = _weighed({"runs": 4_000, "follow_ups": 500}, limit=100_000)

    assert sizes.evictions({"runs": 20, "follow_ups": 40}) == {}


def test_the_heaviest_table_in_bytes_gives_rows_up_first() -> None:
    sizes = _weighed({"runs": 4_000, "follow_ups": 500}, limit=100_000)
    counts = {"runs": 30, "follow_ups": 40}  # 120,000 + 20,000 bytes

    evicted = sizes.evictions(counts)

    # The runs' 120 kB come down to the follow-ups' 20 kB level first: 40,000 bytes are over.
    assert evicted == {"runs": 10}
    left = sum((counts[name] - evicted.get(name, 0)) * sizes.weights[name] for name in counts)
    assert left <= sizes.limit


def test_tables_level_down_together_and_end_within_the_limit() -> None:
    sizes = _weighed({"runs": 4_000, "messages": 1_000, "sessions": 100}, limit=20_000)
    counts = {"runs": 10, "messages": 40, "sessions": 5}  # 40,000 + 40,000 + 500

    evicted = sizes.evictions(counts)

    assert set(evicted) == {"runs", "messages"}, "the small table keeps its rows"
    left = {name: counts[name] - evicted.get(name, 0) for name in counts}
    assert sum(left[name] * sizes.weights[name] for name in counts) <= sizes.limit
    # Neither of the two gives up more than a row beyond the level they come down to.
    assert math.isclose(left["runs"] * 4_000, left["messages"] * 1_000, abs_tol=4_000)
