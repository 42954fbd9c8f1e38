"""A compact view value gives back exactly the text it was made from, whatever the text; the
domain's ids and times take their short forms; stored bytes of no form are refused."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runledger.domain.ids import (
    default_turn_id,
    follow_up_id_for,
    follow_up_message_id,
    restart_run_id,
)
from runledger.infrastructure.views.compact_text import (
    HEX,
    PREFIXES,
    TEXT,
    TIME,
    CompactTextError,
    compact,
    expanded,
)

ANY_TEXT = st.text(st.characters(codec=None, exclude_categories=()))
"""Any text, lone surrogates too (JSON escapes can carry them into a row)."""


@given(ANY_TEXT)
def test_any_text_comes_back_exactly(text: str) -> None:
    assert expanded(compact(text)) == text


@given(ANY_TEXT, ANY_TEXT)
def test_two_texts_share_a_stored_form_only_when_they_are_equal(one: str, other: str) -> None:
    assert (compact(one) == compact(other)) == (one == other)


@given(st.datetimes(timezones=st.just(UTC)))
def test_a_utc_time_as_the_domain_writes_it_takes_nine_bytes(moment: datetime) -> None:
    text = moment.isoformat()

    stored = compact(text)

    assert (stored[0], len(stored), expanded(stored)) == (TIME, 9, text)


@given(st.sampled_from(PREFIXES), st.binary(min_size=1, max_size=64))
def test_lowercase_hex_behind_a_known_prefix_is_kept_as_its_bytes(
    prefix: str, digest: bytes
) -> None:
    text = prefix + digest.hex()

    stored = compact(text)

    assert stored == bytes((HEX, PREFIXES.index(prefix))) + digest
    assert expanded(stored) == text


def test_the_domains_ids_take_their_short_forms() -> None:
    message = follow_up_message_id("follow-up-" + "ab" * 20)
    for text in (
        message,
        follow_up_id_for("run-1", "request-1"),
        default_turn_id(message, 1),
        restart_run_id(message),
        "0" * 64,
    ):
        stored = compact(text)
        assert stored[0] == HEX
        assert len(stored) < len(text) / 2 + 3
        assert expanded(stored) == text


@pytest.mark.parametrize(
    "text",
    [
        # Other spellings of a time: each read back exactly, so kept as text.
        "2026-01-01T00:00:00.000000+00:00",
        "2026-01-01 00:00:00.005000+00:00",
        "2026-01-01T00:00:00.005+00:00",
        "2026-01-01T00:00:00.005000Z",
        "2026-01-01T01:00:00.005000+01:00",
        datetime(2026, 1, 1, tzinfo=timezone(timedelta(hours=2))).isoformat(),
        "2026-01-01T00:00:00.005000",
        "9999-99-99T00:00:00.005000+00:00",
        "2026-02-30T00:00:00+00:00",
        "0000-01-01T00:00:00+00:00",
        "2026-01-01T24:00:00+00:00",
        "2026-01-01T00:60:00+00:00",
        "2026-01-01T00:00:60+00:00",
        "2026-01-01T00:00:00.5+00:00",
        "+026-01-01T00:00:00+00:00",
        "2026-01-01T00:00:00.00500+00:00",
        "\uff12\uff10\uff12\uff16-01-01T00:00:00+00:00",  # fullwidth digits
        "2026-01-01T00:00:00,005000+00:00",
        # Hex that would not read back as written.
        "workflow-message-ABCDEF",
        "follow-up-abc",
        "follow-up-",
        "follow-up-ab cd",
        "a",
        "",
        "workflow-message-xyz",
        "run-1",
    ],
)
def test_other_text_is_kept_as_its_utf8(text: str) -> None:
    stored = compact(text)

    assert stored == bytes((TEXT,)) + text.encode()
    assert expanded(stored) == text


@pytest.mark.parametrize(
    "stored",
    [
        b"",
        bytes((TEXT,)) + b"\xff\xfe",
        bytes((TIME,)) + b"\x00" * 7,
        bytes((TIME,)) + b"\x00" * 9,
        bytes((TIME,)) + (2**62).to_bytes(8, "big"),
        bytes((HEX, len(PREFIXES))) + b"\xab",
        bytes((HEX, 1)),
        bytes((HEX,)),
        b"\x03abc",
        b"\xff",
        b"{}",
    ],
)
def test_bytes_of_no_form_are_refused_not_read_as_some_text(stored: bytes) -> None:
    with pytest.raises(CompactTextError):
        expanded(stored)
