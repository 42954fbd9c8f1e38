"""A projection's row cache gives rows up in bulk exactly as it would one at a time."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from runledger.infrastructure.views.row_sizes import levelled_evictions


def one_at_a_time(sizes: dict[str, int], excess: int) -> dict[str, int]:
    """The rule itself: each row goes from whichever table is then the largest."""
    left, taken = dict(sizes), dict.fromkeys(sizes, 0)
    for _ in range(excess):
        largest = max(left, key=lambda name: left[name])
        left[largest] -= 1
        taken[largest] += 1
    return taken


@st.composite
def caches(draw: st.DrawFn) -> tuple[dict[str, int], int]:
    sizes = draw(
        st.dictionaries(
            st.sampled_from(["runs", "follow_ups", "messages", "sessions", "revisions"]),
            st.integers(0, 60),
            min_size=1,
        )
    )
    total = sum(sizes.values())
    return sizes, draw(st.integers(1, max(total, 1))) if total else 0


@given(caches())
def test_the_tables_end_as_row_by_row_eviction_leaves_them(
    cache: tuple[dict[str, int], int],
) -> None:
    sizes, excess = cache
    if not excess:
        return
    bulk = levelled_evictions(sizes, excess)
    assert sum(bulk.values()) == excess
    assert all(0 <= count <= sizes[name] for name, count in bulk.items())
    # Ties may fall to another table of the same size: the sizes left are what matter.
    expected = one_at_a_time(sizes, excess)
    assert sorted(sizes[n] - bulk.get(n, 0) for n in sizes) == sorted(
        sizes[n] - expected[n] for n in sizes
    )


def test_a_small_table_keeps_its_rows_while_a_large_one_has_any_over_it() -> None:
    assert levelled_evictions({"messages": 1_990, "sessions": 12}, 100) == {"messages": 100}
    assert levelled_evictions({"a": 10, "b": 9, "c": 2}, 5) == {"a": 3, "b": 2}
    assert levelled_evictions({"a": 3, "b": 3}, 6) == {"a": 3, "b": 3}
