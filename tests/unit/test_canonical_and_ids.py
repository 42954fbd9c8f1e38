"""Canonical JSON as upstream hashes it, and the golden identifiers of upstream §11."""

from __future__ import annotations

from datetime import datetime
from typing import Any
from uuid import NAMESPACE_URL, uuid5

import pytest

from runledger.domain.canonical import (
    canonical_json,
    check_plain_json,
    js_number,
    json_digest,
    sha256hex,
)
from runledger.domain.errors import (
    JsonIntegerTooLargeError,
    NonFiniteJsonNumberError,
    NotPlainJsonError,
)
from runledger.domain.ids import (
    aggregate_id,
    follow_up_id_for,
    follow_up_message_id,
    restart_run_id,
    terminal_message_id,
    terminal_source_id,
    workflow_message_id_for,
)
from tests.support.upstream_ids import resource_id_for, session_request_id

# -- JavaScript number formatting -------------------------------------------------------------


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (1.0, "1"),
        (100.0, "100"),
        (-1.5, "-1.5"),
        (0.5, "0.5"),
        (-0.0, "0"),
        (0.0, "0"),
        (0.1 + 0.2, "0.30000000000000004"),
        (1234.5678, "1234.5678"),
        (1e20, "100000000000000000000"),
        (1e21, "1e+21"),
        (1.5e300, "1.5e+300"),
        (1.7976931348623157e308, "1.7976931348623157e+308"),
        (9007199254740992.0, "9007199254740992"),
        (999999999999999900000.0, "999999999999999900000"),
        (1e-6, "0.000001"),
        (1.2e-6, "0.0000012"),
        (1e-7, "1e-7"),
        (1.23e-18, "1.23e-18"),
        (5e-324, "5e-324"),
    ],
)
def test_floats_are_formatted_as_javascript_formats_numbers(number: float, text: str) -> None:
    assert js_number(number) == text
    assert canonical_json(number) == text


@pytest.mark.parametrize("number", [0, 1, -7, 2**53])
def test_integers_are_written_without_a_fraction(number: int) -> None:
    assert canonical_json(number) == str(number)


@pytest.mark.parametrize(
    ("number", "text"),
    [
        pytest.param(2**53 + 1, "9007199254740992", id="int-beyond-double-precision"),
        pytest.param(10**19, "10000000000000000000", id="int-1e19"),
        pytest.param(-(2**60), "-1152921504606847000", id="negative-int-2e60"),
    ],
)
def test_large_integers_are_formatted_as_the_javascript_double_they_would_be(
    number: int, text: str
) -> None:
    assert canonical_json(number) == text


@pytest.mark.parametrize("number", [2**64, -(2**63) - 1, 10**21])
def test_integers_the_store_cannot_hold_are_rejected_clearly(number: int) -> None:
    with pytest.raises(JsonIntegerTooLargeError, match="JSON integers must be between"):
        canonical_json({"count": number})


# -- canonical JSON ---------------------------------------------------------------------------


def test_canonical_json_has_no_whitespace_and_sorted_keys() -> None:
    value = {"b": [1, 2.5, {"z": None, "a": True}], "a": "x", "c": False}
    assert canonical_json(value) == '{"a":"x","b":[1,2.5,{"a":true,"z":null}],"c":false}'


def test_keys_sort_by_utf16_code_units_so_astral_characters_precede_the_last_bmp_one() -> None:
    # "\U0001f600" is the surrogate pair D83D DE00 in UTF-16, which sorts before U+FFFF;
    # sorting by code point would put it last.
    assert canonical_json({"\uffff": 1, "\U0001f600": 2, "a": 3}) == (
        '{"a":3,"\U0001f600":2,"\uffff":1}'
    )


def test_keys_sort_by_code_unit_not_by_locale() -> None:
    assert canonical_json({"b": 1, "B": 2, "a": 3, "é": 4, "_": 5}) == (
        '{"B":2,"_":5,"a":3,"b":1,"é":4}'
    )


def test_strings_are_escaped_as_json_stringify_escapes_them() -> None:
    text = 'q"b\\s\nt\tc\u0001d\u007f\u2028é\U0001f600'
    assert canonical_json(text) == '"q\\"b\\\\s\\nt\\tc\\u0001d\u007f\u2028é\U0001f600"'


def test_a_lone_surrogate_is_escaped_as_json_stringify_does() -> None:
    assert canonical_json("a\ud800b") == '"a\\ud800b"'


def test_a_tuple_is_written_as_an_array() -> None:
    assert canonical_json({"pair": (1, "two")}) == '{"pair":[1,"two"]}'


@pytest.mark.parametrize("number", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_numbers_are_rejected(number: float) -> None:
    with pytest.raises(NonFiniteJsonNumberError) as raised:
        canonical_json({"nested": [number]})
    assert str(raised.value) == "JSON numbers must be finite"


@pytest.mark.parametrize(
    "value",
    [
        pytest.param({1, 2}, id="set"),
        pytest.param(object(), id="object"),
        pytest.param({1: "int key"}, id="int-key"),
        pytest.param({"nested": {None: 1}}, id="nested-none-key"),
        pytest.param([b"bytes"], id="bytes"),
    ],
)
def test_values_that_are_not_plain_json_are_rejected(value: Any) -> None:
    with pytest.raises(NotPlainJsonError) as raised:
        check_plain_json(value, "input")
    assert str(raised.value).startswith("Only plain objects can be stored as canonical JSON (input")


@pytest.mark.parametrize(
    ("value", "where"),
    [
        pytest.param({1, 2}, "input is a set", id="set"),
        pytest.param({"when": datetime(2026, 1, 1)}, "input.when is a datetime", id="datetime"),
        pytest.param([0, [1, object()]], "input[1][1] is an object", id="nested-list"),
        pytest.param({"a b": {2: 1}}, 'input["a b"] has a key of type int', id="odd-key"),
        pytest.param({"b": b"x", "a": {1}}, "input.a is a set", id="first-in-written-order"),
    ],
)
def test_a_value_that_is_no_json_names_the_argument_and_path(value: Any, where: str) -> None:
    with pytest.raises(NotPlainJsonError) as raised:
        check_plain_json(value, "input")
    assert str(raised.value) == f"Only plain objects can be stored as canonical JSON ({where})"
    assert raised.value.where == where


def test_a_non_finite_number_names_where_it_is() -> None:
    with pytest.raises(NonFiniteJsonNumberError) as raised:
        check_plain_json({"scores": [1.0, float("inf")]}, "data")
    assert str(raised.value) == "JSON numbers must be finite (data.scores[1] is inf)"


def test_canonical_json_itself_keeps_upstreams_message() -> None:
    with pytest.raises(NotPlainJsonError) as raised:
        canonical_json({1, 2})
    assert str(raised.value) == "Only plain objects can be stored as canonical JSON"


def test_sha256hex_hashes_the_utf8_bytes() -> None:
    assert sha256hex("€") == sha256hex("€".encode())
    assert sha256hex("abc") == ("ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad")


def test_json_digest_is_the_sha256_of_the_canonical_text() -> None:
    assert json_digest({"b": 1, "a": 1.0}) == sha256hex('{"a":1,"b":1}')


# -- golden identifiers (upstream §11) ----------------------------------------------------------

A11_FOLLOW_UP_ID = "follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27"


def test_a11_follow_up_id_of_run_1_and_follow_1() -> None:
    assert follow_up_id_for("run-1", "follow-1") == A11_FOLLOW_UP_ID


def test_a11_follow_up_resource_id() -> None:
    assert resource_id_for("follow_up", A11_FOLLOW_UP_ID) == (
        "follow_up-33576a74181a610d12ff70840ba80c181aec323f"
    )


def test_a11_follow_up_workflow_message_id() -> None:
    expected = "workflow-message-1de0d362a50efb25288e8a140cf87639d6e3ff7273b62c25a80642fcbb7c30e6"
    assert follow_up_message_id(A11_FOLLOW_UP_ID) == expected
    assert workflow_message_id_for("followUp", A11_FOLLOW_UP_ID, "initial") == expected
    assert expected == "workflow-message-" + sha256hex(
        '{"idempotencyKey":"initial","kind":"followUp","sourceId":"' + A11_FOLLOW_UP_ID + '"}'
    )


def test_e4_restart_run_id_of_a_terminal_message() -> None:
    assert restart_run_id("workflow-message-abc") == (
        "restart-0c3807a4b8eaa4631d570711107144f5d0c38bdf"
    )


def test_e5_session_request_id_of_a_client_and_idempotency_key() -> None:
    assert session_request_id("client-1", "key-1") == (
        "session-c47d893b517f69e0d2e41767a8c90bbf90bba064257e621c6a041e67bd9ffb2a"
    )


def test_f7_terminal_fingerprint() -> None:
    facts: dict[str, Any] = {
        "workflowRef": "builtin:echo",
        "input": {},
        "status": "failed",
        "finalOutput": None,
        "error": "boom",
        "reason": None,
    }
    assert json_digest(facts) == (
        "96eeb2504de7d6d9f3b48c7fb61a8db885d657d807eb63a3b5a2c47f069ac4b9"
    )


def test_f7_terminal_message_id_of_run_1() -> None:
    fingerprint = "96eeb2504de7d6d9f3b48c7fb61a8db885d657d807eb63a3b5a2c47f069ac4b9"
    assert terminal_source_id("run-1") == "terminal:run-1"
    assert terminal_message_id("run-1", fingerprint) == (
        "workflow-message-21fc3503db23d2995a9f7d36502465d90b8a1200307e9813372b3a0913069e0f"
    )


@pytest.mark.parametrize(
    ("kind", "natural_id", "expected"),
    [
        ("run", "run-1", "331bfa57-196a-55de-8a1a-9598fcebd302"),
        ("follow-up", A11_FOLLOW_UP_ID, None),
        ("workflow-message", "workflow-message-abc", None),
        ("workflow-turn", "turn-1", None),
    ],
)
def test_aggregate_ids_are_uuid5_of_the_kind_and_natural_id(
    kind: Any, natural_id: str, expected: str | None
) -> None:
    computed = uuid5(NAMESPACE_URL, f"runledger:{kind}:{natural_id}")
    assert aggregate_id(kind, natural_id) == computed
    if expected is not None:
        assert str(computed) == expected
