"""The checks every argument passes at the store's door: text, depth and size limits."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from runledger.domain.arguments import KEY_ARGUMENTS, SIZED_BY_RULES, check_argument
from runledger.domain.errors import (
    InvalidMessageContentError,
    InvalidRunIdError,
    InvalidTextError,
    KeyTooLongError,
    ValueTooDeepError,
    ValueTooLargeError,
    shown,
)
from runledger.domain.values import (
    MAX_ARGUMENT_TEXT_BYTES,
    MAX_ARGUMENT_VALUES,
    MAX_JSON_DEPTH,
    MAX_KEY_TEXT_BYTES,
    Actor,
)
from runledger.infrastructure.store import WorkflowStore, open_store


def nested(depth: int) -> Any:
    value: Any = 0
    for _ in range(depth):
        value = [value]
    return value


def test_an_argument_its_rule_sizes_passes_the_door_at_any_size() -> None:
    check_argument("records", [{"pad": "x" * MAX_ARGUMENT_TEXT_BYTES}] * 3, sized=False)
    check_argument("records", [0] * (MAX_ARGUMENT_VALUES + 1), sized=False)
    check_argument("prompt", "x" * (MAX_ARGUMENT_TEXT_BYTES + 1), sized=False)


def test_an_argument_its_rule_sizes_is_still_walked_whole_for_text_and_depth() -> None:
    # Past the door's size limit, where a sized walk stops: the text and the depth at the end.
    big = {str(index): index for index in range(MAX_ARGUMENT_VALUES)}
    with pytest.raises(InvalidTextError):
        check_argument(
            "records", [big, ["x" * MAX_ARGUMENT_TEXT_BYTES], {"k": "\ud800"}], sized=False
        )
    with pytest.raises(ValueTooDeepError):
        check_argument("records", [big, nested(MAX_JSON_DEPTH)], sized=False)


@pytest.mark.parametrize(("command", "names"), sorted(SIZED_BY_RULES.items()))
def test_every_argument_sized_by_a_rule_is_a_parameter_of_its_command(
    command: str, names: frozenset[str]
) -> None:
    assert names <= set(inspect.signature(getattr(WorkflowStore, command)).parameters)


@pytest.mark.parametrize("text", ["x\ud800", "\udfff", "a\x00b"])
def test_a_lone_surrogate_or_nul_anywhere_is_invalid_text(text: str) -> None:
    for value in (text, {"k": text}, {text: 1}, [[text]], Actor("session", text)):
        with pytest.raises(InvalidTextError, match=r"^Workflow argument title must be"):
            check_argument("title", value)


def test_an_argument_with_an_upstream_rule_keeps_its_upstream_error() -> None:
    with pytest.raises(InvalidRunIdError, match=r'^Invalid workflow run id: "\\ud800"$'):
        check_argument("run_id", "\ud800")
    with pytest.raises(InvalidMessageContentError):
        check_argument("content", {"details": nested(MAX_JSON_DEPTH + 1)})


def test_nesting_is_allowed_to_the_documented_depth_and_no_deeper() -> None:
    check_argument("input", nested(MAX_JSON_DEPTH))

    with pytest.raises(ValueTooDeepError, match="nested more than 64 levels deep"):
        check_argument("input", nested(MAX_JSON_DEPTH + 1))


def test_a_value_nesting_itself_is_too_deep_rather_than_endless() -> None:
    loop: list[Any] = []
    loop.append(loop)

    with pytest.raises(ValueTooDeepError):
        check_argument("input", loop)


def test_values_and_text_are_allowed_to_the_documented_size_and_no_more() -> None:
    check_argument("input", [0] * MAX_ARGUMENT_VALUES)
    check_argument("input", "é" * (MAX_ARGUMENT_TEXT_BYTES // 2))

    with pytest.raises(ValueTooLargeError):
        check_argument("input", [0] * (MAX_ARGUMENT_VALUES + 1))
    with pytest.raises(ValueTooLargeError):
        check_argument("input", ["é" * (MAX_ARGUMENT_TEXT_BYTES // 4), "é" * 1000] * 2)


@pytest.mark.parametrize("name", sorted(KEY_ARGUMENTS))
def test_text_that_keys_the_read_models_is_bounded_in_utf8_bytes(name: str) -> None:
    check_argument(name, "s" * MAX_KEY_TEXT_BYTES)
    check_argument(name, "🙂" * (MAX_KEY_TEXT_BYTES // 4))

    with pytest.raises(KeyTooLongError) as raised:
        check_argument(name, "s" * (MAX_KEY_TEXT_BYTES + 1))
    assert str(raised.value) == f"Workflow argument {name} is longer than 1024 bytes of UTF-8"
    with pytest.raises(KeyTooLongError):
        check_argument(name, "🙂" * (MAX_KEY_TEXT_BYTES // 4) + "s")
    # Other text, and what is not text at all, is left to the other checks and the rules.
    check_argument("prompt", "s" * (MAX_KEY_TEXT_BYTES + 1))
    check_argument(name, ["s" * (MAX_KEY_TEXT_BYTES + 1)])


def test_an_id_nested_two_thousand_deep_gets_a_short_message() -> None:
    with open_store("memory://") as store, pytest.raises(InvalidRunIdError) as raised:
        store.pause_run(nested(2000))

    assert len(str(raised.value)) < 100


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("x" * 2000, "x" * 1024 + "…"),
        ("a\ud800", "a\\ud800"),
        (2**255, 2**255),
        (2**300, "<an integer of 301 bits>"),
    ],
    ids=["long text", "lone surrogate", "big int", "huge int"],
)
def test_a_message_shows_a_value_bounded_and_printable(value: object, expected: object) -> None:
    assert shown(value) == expected


def test_rejected_hostile_text_writes_nothing() -> None:
    with open_store("memory://") as store:
        store.create_run("run-1", workflow_name="echo", input={})
        before = store.event_log()

        with pytest.raises(InvalidTextError, match="argument prompt"):
            store.queue_follow_up(
                "run-1",
                request_id="q",
                target_session_id="s",
                actor=Actor("session", "s"),
                source="wt",
                prompt="x\ud800",
            )

        assert store.event_log() == before
