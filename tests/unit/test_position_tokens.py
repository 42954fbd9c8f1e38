"""Position tokens: what a read must see (a WAL position and a log position) as opaque text
that round-trips, and anything else refused with ``store.invalid-position-token``."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.domain.errors import InvalidPositionTokenError
from runledger.infrastructure.storage.replicas import (
    WAL_PAGE_BYTES,
    WAL_PAGE_HEADER_BYTES,
    ReadPosition,
    WrittenPositions,
    lsn_of,
)


def test_a_token_round_trips_to_the_same_position() -> None:
    position = ReadPosition(lsn=0x1_6B37_4D48, position=1234)

    assert ReadPosition.from_token(position.token()) == position


def test_the_empty_position_has_a_token_too() -> None:
    assert ReadPosition.from_token(ReadPosition().token()) == ReadPosition()


def test_merged_positions_cover_both() -> None:
    merged = ReadPosition(lsn=10, position=3).merged(ReadPosition(lsn=7, position=5))

    assert merged == ReadPosition(lsn=10, position=5)


def test_written_positions_only_move_forward() -> None:
    written = WrittenPositions()
    written.advance(100, 7)
    written.advance(90, 9)

    assert written.current == ReadPosition(lsn=100, position=9)


@pytest.mark.parametrize(
    "token",
    ["", "rl1", "rl1.0", "rl1.x.0", "rl2.0.0", " rl1.0.0", "rl1.0.0\n", "rl1.00000000000000000.0"],
)
def test_a_malformed_token_is_refused_with_its_code(token: str) -> None:
    with pytest.raises(InvalidPositionTokenError) as raised:
        ReadPosition.from_token(token)

    assert raised.value.code == "store.invalid-position-token"
    assert str(raised.value).startswith("Position token ")


@pytest.mark.parametrize("token", [None, 7, b"rl1.0.0", ["rl1.0.0"]])
def test_a_token_that_is_not_text_is_refused(token: Any) -> None:
    with pytest.raises(InvalidPositionTokenError, match="a token is text"):
        ReadPosition.from_token(token)


def test_a_commit_position_just_past_a_wal_page_header_is_taken_at_the_page_boundary() -> None:
    # A replica replaying up to the boundary has every record before it: it must qualify.
    assert lsn_of({"lsn": 3 * WAL_PAGE_BYTES + WAL_PAGE_HEADER_BYTES}) == 3 * WAL_PAGE_BYTES


def test_a_commit_position_anywhere_else_is_taken_as_it_is() -> None:
    assert lsn_of({"lsn": 3 * WAL_PAGE_BYTES + 200}) == 3 * WAL_PAGE_BYTES + 200
    assert lsn_of(None) == 0


def test_a_long_malformed_token_is_quoted_by_its_start_only() -> None:
    with pytest.raises(InvalidPositionTokenError) as raised:
        ReadPosition.from_token("x\ud800" * 10_000)

    assert len(str(raised.value)) < 500
