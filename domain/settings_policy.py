"""Settings scope ids, policies and RFC 6902 patches: the pure rules of upstream §9.1-9.2.

A policy is stored with its scope (DESIGN decision 18), so replaying a scope never depends on
code that may have changed; patches are applied by the ``jsonpatch`` library, one operation at
a time, so each operation is authorised against the value it actually meets.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, Final

import jsonpatch
import jsonpointer

from runledger.domain.canonical import canonical_json, check_plain_json
from runledger.domain.errors import (
    InvalidSettingsChangeNumberError,
    InvalidSettingsInvocationError,
    InvalidSettingsMountPathError,
    InvalidSettingsPatchError,
    InvalidSettingsPolicyError,
    SettingsPermissionError,
    SettingsTooLargeError,
)
from runledger.domain.values import ACTOR_TYPES, MAX_ARGUMENT_TEXT_BYTES, JsonValue, is_count

ROOT_MOUNT: Final = "$root"
DEFAULT_MAX_BYTES: Final = 65536
PERMISSIONS: Final = ("read", "add", "replace", "remove")
PATCH_OPS: Final = frozenset({"add", "remove", "replace", "move", "copy", "test"})
_VALUE_OPS: Final = frozenset({"add", "replace", "test"})
_FROM_OPS: Final = frozenset({"move", "copy"})

Policy = dict[str, Any]
"""``{"rules": [{"path", "permissions": {actor type: [permission]}}], "max_bytes": N}``."""


def check_invocation(invocation: object) -> int:
    # At most MAX_COUNT, as a page position: a larger one is no invocation any backend's
    # 64-bit integers hold (SQLite raised OverflowError for 2**63), so it gets the message
    # of an invocation that is not one.
    if not is_count(invocation) or invocation < 1:
        raise InvalidSettingsInvocationError()
    return invocation


def check_change_number(number: object) -> int:
    if not is_count(number):
        raise InvalidSettingsChangeNumberError()
    return number


def check_expected_change_number(number: object) -> int | None:
    return None if number is None else check_change_number(number)


def check_mount_path(mount_path: object) -> str:
    if not isinstance(mount_path, str):
        raise InvalidSettingsMountPathError()
    return mount_path


def settings_scope_id(origin_run_id: str, mount_path: object, invocation: object) -> str:
    """Upstream ``workflowSettingsScopeId``: ``<origin>:<mount path or $root>:<invocation>``."""
    mount = check_mount_path(mount_path)
    number = check_invocation(invocation)
    return f"{origin_run_id}:{mount or ROOT_MOUNT}:{number}"


def _is_pointer(pointer: object) -> bool:
    if not isinstance(pointer, str):
        return False
    try:
        jsonpointer.JsonPointer(pointer)
    except jsonpointer.JsonPointerException:
        return False
    return True


def _check_pointer(pointer: object, name: str) -> str:
    if not _is_pointer(pointer):
        raise InvalidSettingsPatchError(f"{name} {pointer!r} is not a JSON pointer")
    return str(pointer)


def check_policy(policy: object) -> Policy:
    """The policy in its stored form; anything malformed names what is wrong."""
    if not isinstance(policy, Mapping):
        raise InvalidSettingsPolicyError("it must be an object with rules and max_bytes")
    unknown = sorted(set(policy) - {"rules", "max_bytes"})
    if unknown:
        raise InvalidSettingsPolicyError(f"unknown fields {unknown}")
    max_bytes = policy.get("max_bytes", DEFAULT_MAX_BYTES)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 1:
        raise InvalidSettingsPolicyError("max_bytes must be a positive integer")
    if max_bytes > MAX_ARGUMENT_TEXT_BYTES:
        # The settings argument is sized by the policy alone (``arguments.SIZED_BY_RULES``):
        # the store's limit on one value bounds the policy instead.
        raise InvalidSettingsPolicyError(f"max_bytes must be at most {MAX_ARGUMENT_TEXT_BYTES}")
    rules = policy.get("rules")
    if not isinstance(rules, list):
        raise InvalidSettingsPolicyError("rules must be a list")
    checked: list[dict[str, Any]] = []
    seen: set[str] = set()
    for rule in rules:
        path, permissions = _check_rule(rule)
        if path in seen:
            raise InvalidSettingsPolicyError(f"two rules name the path {path!r}")
        seen.add(path)
        checked.append({"path": path, "permissions": permissions})
    return {"rules": checked, "max_bytes": max_bytes}


def _check_rule(rule: object) -> tuple[str, dict[str, list[str]]]:
    if not isinstance(rule, Mapping) or set(rule) != {"path", "permissions"}:
        raise InvalidSettingsPolicyError("each rule must be an object with path and permissions")
    path = rule["path"]
    if not _is_pointer(path):
        raise InvalidSettingsPolicyError(f"rule path {path!r} is not a JSON pointer")
    grants = rule["permissions"]
    if not isinstance(grants, Mapping):
        raise InvalidSettingsPolicyError(f"permissions of {path!r} must be an object")
    permissions: dict[str, list[str]] = {}
    for actor_type, granted in grants.items():
        if actor_type not in ACTOR_TYPES:
            raise InvalidSettingsPolicyError(f"unknown actor type {actor_type!r}")
        if not isinstance(granted, list) or any(p not in PERMISSIONS for p in granted):
            raise InvalidSettingsPolicyError(
                f"permissions of {path!r} for {actor_type} must be a list of "
                + ", ".join(PERMISSIONS)
            )
        permissions[actor_type] = sorted(set(granted), key=PERMISSIONS.index)
    return path, permissions


def check_patch(patch: object) -> list[dict[str, Any]]:
    """An RFC 6902 patch: a list of operations with JSON-pointer paths and plain JSON values."""
    if not isinstance(patch, list) or not patch:
        raise InvalidSettingsPatchError("it must be a non-empty list of RFC 6902 operations")
    for index, operation in enumerate(patch):
        _check_operation(index, operation)
    try:
        jsonpatch.JsonPatch(patch)
    except jsonpatch.JsonPatchException as error:
        raise InvalidSettingsPatchError(str(error)) from error
    return [dict(operation) for operation in patch]


def changed_paths(patch: list[dict[str, Any]]) -> list[str]:
    """The JSON pointers a checked patch writes, distinct, in patch order: each operation's
    path, and a move's ``from`` as well; a ``test`` writes nothing."""
    paths: dict[str, None] = {}
    for operation in patch:
        if operation["op"] == "test":
            continue
        if operation["op"] == "move":
            paths[operation["from"]] = None
        paths[operation["path"]] = None
    return list(paths)


def _check_operation(index: int, operation: object) -> None:
    if not isinstance(operation, Mapping):
        raise InvalidSettingsPatchError(f"operation {index} is not an object")
    op = operation.get("op")
    if op not in PATCH_OPS:
        raise InvalidSettingsPatchError(f"operation {index} has no RFC 6902 op: {op!r}")
    _check_pointer(operation.get("path"), f"operation {index} path")
    if op in _FROM_OPS:
        _check_pointer(operation.get("from"), f"operation {index} from")
    if op in _VALUE_OPS:
        if "value" not in operation:
            raise InvalidSettingsPatchError(f"operation {index} ({op}) has no value")
        check_plain_json(operation["value"], f"patch[{index}].value")


def _exists(document: JsonValue, path: str) -> bool:
    pointer = jsonpointer.JsonPointer(path)
    if pointer.parts and pointer.parts[-1] == "-":
        # "/-" names the slot past an array's end: appending adds, it never replaces.
        return False
    try:
        pointer.resolve(document)
    except jsonpointer.JsonPointerException:
        return False
    return True


def _needed(operation: Mapping[str, Any], document: JsonValue) -> Iterator[tuple[str, str]]:
    """(permission, path) pairs one operation needs, upstream §9.2 d."""
    op, path = operation["op"], operation["path"]
    if op == "test":
        yield "read", path
        return
    if op in _FROM_OPS:
        yield "read", operation["from"]
        if op == "move":
            yield "remove", operation["from"]
    if op in ("add", "copy", "move"):
        yield ("replace" if _exists(document, path) else "add"), path
    else:
        yield op, path


def _covers(rule_path: str, path: str) -> bool:
    # Segment boundaries: "/notes" covers "/notes" and "/notes/0", never "/notesx".
    return rule_path == "" or path == rule_path or path.startswith(rule_path + "/")


def check_allowed(policy: Policy, actor_type: str, permission: str, path: str) -> None:
    """The most specific covering rule decides; no rule or no grant is a refusal."""
    best: dict[str, Any] | None = None
    for rule in policy["rules"]:
        if _covers(rule["path"], path) and (best is None or len(rule["path"]) > len(best["path"])):
            best = rule
    if best is None or permission not in best["permissions"].get(actor_type, ()):
        raise SettingsPermissionError(permission=permission, path=path, actor_type=actor_type)


def check_size(policy: Policy, value: JsonValue) -> None:
    limit: int = policy["max_bytes"]
    if len(canonical_json(value).encode("utf-8", "surrogatepass")) > limit:
        raise SettingsTooLargeError(limit=limit)


def patched(
    policy: Policy, actor_type: str, document: JsonValue, patch: list[dict[str, Any]]
) -> JsonValue:
    """The value after ``patch``: every operation authorised, then the size limit checked."""
    value = document
    for operation in patch:
        for permission, path in _needed(operation, value):
            check_allowed(policy, actor_type, permission, path)
        try:
            value = jsonpatch.apply_patch(value, [operation])
        except (jsonpatch.JsonPatchException, jsonpointer.JsonPointerException) as error:
            raise InvalidSettingsPatchError(str(error)) from error
    check_size(policy, value)
    return value
