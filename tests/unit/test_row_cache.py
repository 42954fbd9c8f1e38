"""A runner's row cache: bounded in rows, least recently used first within a table, and an
eviction taken from the table holding the most rows, so small tables stay whole."""

from __future__ import annotations

from runledger.infrastructure.views.row_cache import Missing, RowCache


def test_a_held_row_and_a_held_none_are_answers_an_unheld_one_is_missing() -> None:
    cache = RowCache(10)
    cache.put("runs", ("r1",), {"run_id": "r1"})
    cache.put("runs", ("r2",), None)

    assert cache.get("runs", ("r1",)) == {"run_id": "r1"}
    assert cache.get("runs", ("r2",)) is None
    assert isinstance(cache.get("runs", ("r3",)), Missing)
    assert isinstance(cache.get("sessions", ("r1",)), Missing)
    assert len(cache) == 2


def test_an_eviction_takes_the_oldest_row_of_the_largest_table() -> None:
    cache = RowCache(5)
    cache.put("sessions", ("s1",), {"n": 1})
    cache.put("sessions", ("s2",), {"n": 2})
    for number in range(3):
        assert not cache.put("messages", (number,), {"m": number})

    assert cache.put("messages", (3,), {"m": 3})  # six rows: one goes

    assert isinstance(cache.get("messages", (0,)), Missing)
    assert cache.get("sessions", ("s1",)) == {"n": 1}, "the small table stays whole"
    assert len(cache) == 5


def test_using_a_row_keeps_it_and_peeking_does_not() -> None:
    cache = RowCache(3)
    for number in range(3):
        cache.put("messages", (number,), {"m": number})
    cache.get("messages", (0,))
    assert cache.peek("messages", (1,)) == {"m": 1}

    cache.put("messages", (3,), {"m": 3})

    assert cache.get("messages", (0,)) == {"m": 0}
    assert isinstance(cache.get("messages", (1,)), Missing), "a peek is no use"


def test_putting_a_held_row_again_replaces_it_without_growing() -> None:
    cache = RowCache(2)
    cache.put("runs", ("r1",), {"v": 1})
    assert not cache.put("runs", ("r1",), {"v": 2})
    assert cache.get("runs", ("r1",)) == {"v": 2}
    assert len(cache) == 1
    cache.clear()
    assert len(cache) == 0
    assert isinstance(cache.get("runs", ("r1",)), Missing)
