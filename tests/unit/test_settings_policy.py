"""The pure settings rules: scope ids (J1), rule coverage on segment boundaries and the
permission each RFC 6902 operation needs (upstream §9.2 d, DESIGN decision 18)."""

from __future__ import annotations

from typing import Any

import pytest

from runledger.domain.errors import (
    InvalidSettingsChangeNumberError,
    InvalidSettingsInvocationError,
    SettingsPermissionError,
    SettingsTooLargeError,
)
from runledger.domain.settings_policy import (
    check_allowed,
    check_change_number,
    check_policy,
    patched,
    settings_scope_id,
)


def policy(*rules: tuple[str, dict[str, list[str]]], max_bytes: int = 1024) -> dict[str, Any]:
    return check_policy(
        {"rules": [{"path": p, "permissions": g} for p, g in rules], "max_bytes": max_bytes}
    )


def test_j1_the_root_scope_id() -> None:
    assert settings_scope_id("run-1", "", 1) == "run-1:$root:1"


def test_j1_a_mounted_scope_id() -> None:
    assert settings_scope_id("run-1", "child", 2) == "run-1:child:2"


def test_j1_invocation_0_is_not_a_positive_integer() -> None:
    with pytest.raises(InvalidSettingsInvocationError, match="positive integer"):
        settings_scope_id("run-1", "", 0)


@pytest.mark.parametrize("invocation", [2**63, 2**64, -(2**63)])
def test_an_invocation_no_64_bit_integer_holds_is_not_one(invocation: int) -> None:
    # Found by the deep hostile-arguments fuzz: SQLite raised OverflowError for these.
    with pytest.raises(InvalidSettingsInvocationError, match="positive integer"):
        settings_scope_id("run-1", "", invocation)


def test_the_largest_64_bit_invocation_is_one() -> None:
    assert settings_scope_id("run-1", "", 2**63 - 1) == f"run-1:$root:{2**63 - 1}"


def test_a_change_number_no_64_bit_integer_holds_is_not_one() -> None:
    with pytest.raises(InvalidSettingsChangeNumberError, match="non-negative integer"):
        check_change_number(2**63)


@pytest.mark.parametrize("path", ["/notes", "/notes/0", "/notes/-", "/notes/a/b"])
def test_a_rule_covers_its_path_and_everything_below_it(path: str) -> None:
    check_allowed(policy(("/notes", {"session": ["add"]})), "session", "add", path)


def test_a_rule_does_not_cover_a_sibling_that_shares_its_prefix() -> None:
    with pytest.raises(SettingsPermissionError):
        check_allowed(policy(("/notes", {"session": ["add"]})), "session", "add", "/notesx")


def test_the_most_specific_rule_wins_even_when_it_grants_less() -> None:
    rules = policy(("", {"human": ["replace"]}), ("/locked", {"human": ["read"]}))

    check_allowed(rules, "human", "replace", "/open")
    with pytest.raises(SettingsPermissionError):
        check_allowed(rules, "human", "replace", "/locked/inner")


def test_adding_to_the_end_of_an_array_is_an_add_not_a_replace() -> None:
    rules = policy(("/notes", {"session": ["add"]}))

    assert patched(
        rules, "session", {"notes": ["a"]}, [{"op": "add", "path": "/notes/-", "value": "b"}]
    ) == {"notes": ["a", "b"]}


def test_adding_over_an_existing_member_needs_replace() -> None:
    rules = policy(("/mode", {"session": ["add"]}))

    with pytest.raises(SettingsPermissionError, match='replace is not allowed at "/mode"'):
        patched(rules, "session", {"mode": "a"}, [{"op": "add", "path": "/mode", "value": "b"}])


def test_each_operation_is_authorised_against_the_value_the_previous_ones_left() -> None:
    rules = policy(("/mode", {"session": ["add", "remove"]}))
    patch = [{"op": "remove", "path": "/mode"}, {"op": "add", "path": "/mode", "value": "b"}]

    assert patched(rules, "session", {"mode": "a"}, patch) == {"mode": "b"}


def test_patching_never_changes_the_value_it_was_given() -> None:
    value = {"notes": ["a"]}

    patched(
        policy(("/notes", {"human": ["add"]})),
        "human",
        value,
        [{"op": "add", "path": "/notes/-", "value": "b"}],
    )

    assert value == {"notes": ["a"]}


def test_the_size_limit_counts_the_canonical_utf8_bytes() -> None:
    rules = policy(("", {"human": ["replace"]}), max_bytes=12)
    patch = [{"op": "replace", "path": "/m", "value": "é"}]

    assert patched(rules, "human", {"m": "a"}, patch) == {"m": "é"}  # {"m":"é"} is 10 bytes
    with pytest.raises(SettingsTooLargeError, match="cannot exceed 12 bytes"):
        patched(rules, "human", {"m": "a"}, [{"op": "replace", "path": "/m", "value": "ééé"}])
