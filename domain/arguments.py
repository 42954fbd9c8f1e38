"""The checks every argument of a public command or query passes before any rule sees it.

Rules check meaning (a run id's shape, a prompt's size); these check that a value can be
stored at all: text is valid Unicode that every backend holds byte for byte, and a value is
bounded in depth and size. They walk a value without recursion, so no nesting depth, however
hostile, reaches the interpreter's recursion limit, the JSON encoder or a database driver
(orjson, which a large value meets first, stops at its own depth limit and raises).
"""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import fields, is_dataclass
from typing import Final, Literal

import orjson

from runledger.domain.errors import (
    InvalidActorError,
    InvalidBranchEntryError,
    InvalidMessageContentError,
    InvalidRequestIdError,
    InvalidRunIdError,
    InvalidSourceError,
    InvalidTextError,
    KeyTooLongError,
    ValueTooDeepError,
    ValueTooLargeError,
    WorkflowError,
)
from runledger.domain.follow_ups import MAX_REQUEST_ID_LENGTH, MAX_SOURCE_LENGTH
from runledger.domain.values import (
    MAX_ARGUMENT_TEXT_BYTES,
    MAX_ARGUMENT_VALUES,
    MAX_JSON_DEPTH,
    MAX_KEY_TEXT_BYTES,
)

Problem = Literal["text", "depth", "size"]

UPSTREAM_ERRORS: Final[Mapping[str, Callable[[object], WorkflowError]]] = {
    "run_id": InvalidRunIdError,
    "parent_run_id": InvalidRunIdError,
    "source_run_id": InvalidRunIdError,
    "request_id": lambda _: InvalidRequestIdError(limit=MAX_REQUEST_ID_LENGTH),
    "source": lambda _: InvalidSourceError(limit=MAX_SOURCE_LENGTH),
    "actor": lambda _: InvalidActorError(),
    "content": lambda _: InvalidMessageContentError(),
    "entries": lambda _: InvalidBranchEntryError(),
}
"""Arguments whose upstream rule already rejects such a value: they keep upstream's message
(no run id or request id can hold a lone surrogate, so it is an invalid id)."""


SIZED_BY_RULES: Final[Mapping[str, frozenset[str]]] = {
    "queue_follow_up": frozenset({"prompt"}),
    "append_session_events": frozenset({"records"}),
    "reserve_effect": frozenset({"effect_type", "key"}),
    "ensure_settings_scope": frozenset({"settings"}),
    "change_settings": frozenset({"patch"}),
}
"""Arguments, by command, whose size an upstream rule bounds: the door checks their text and
depth only, so upstream's checks decide first, with upstream's messages (decision 28). The
rules: a prompt of at most 65536 bytes (§4.2), session event records of 1 MiB each and the
batch's ``MAX_SESSION_BATCH_BYTES`` (§3.12), effect labels of 256 characters (§9.4), settings
within the policy's ``max_bytes``, itself at most ``MAX_ARGUMENT_TEXT_BYTES`` (§9.1), and a
patch sized by the door's limits once every settings rule passed (§9.2)."""


KEY_ARGUMENTS: Final = frozenset({"session_id", "target_session_id", "mount_path"})
"""Arguments whose text keys the read models' indexes, so it is bounded by
``MAX_KEY_TEXT_BYTES`` (queries too: no longer key can be stored to be found)."""


def check_arguments(
    names: Iterable[str],
    args: Iterable[object],
    kwargs: Mapping[str, object],
    *,
    sized_by_rules: frozenset[str] = frozenset(),
) -> None:
    """Check each argument of one call; ``names`` are the parameters the positionals fill.
    Those in ``sized_by_rules`` are checked for text and depth only (``SIZED_BY_RULES``)."""
    for name, value in zip(names, args, strict=False):
        check_argument(name, value, sized=name not in sized_by_rules)
    for name, value in kwargs.items():
        check_argument(name, value, sized=name not in sized_by_rules)


def check_argument(name: str, value: object, *, sized: bool = True) -> None:
    """Raise the argument's error if ``value`` holds text or a shape no backend can store
    (with ``sized``, also more than the door's values or bytes of text)."""
    problem = _problem(value, sized=sized)
    if problem is None:
        if name in KEY_ARGUMENTS and _too_long_for_a_key(value):
            raise KeyTooLongError(name, limit=MAX_KEY_TEXT_BYTES)
        return
    upstream = UPSTREAM_ERRORS.get(name)
    if upstream is not None:
        raise upstream(value)
    if problem == "text":
        raise InvalidTextError(name)
    if problem == "depth":
        raise ValueTooDeepError(name, limit=MAX_JSON_DEPTH)
    raise ValueTooLargeError(name, values=MAX_ARGUMENT_VALUES, text_bytes=MAX_ARGUMENT_TEXT_BYTES)


def _too_long_for_a_key(value: object) -> bool:
    # Valid text under the 1 MiB bound already, so encoding it is cheap and cannot fail;
    # a short one is not encoded at all (a character is at most 4 bytes).
    return (
        isinstance(value, str)
        and len(value) * 4 > MAX_KEY_TEXT_BYTES
        and len(value.encode()) > MAX_KEY_TEXT_BYTES
    )


def _problem(value: object, *, sized: bool = True) -> Problem | None:
    if isinstance(value, str):
        # The common case, an argument that is one short text, skips the walk.
        size = _text_bytes(value)
        if size is None:
            return "text"
        return "size" if sized and size > MAX_ARGUMENT_TEXT_BYTES else None
    if _children(value, sized=sized) is None:
        return None
    if not sized and _surely_storable(value):
        return None
    return _walked_problem(value, sized=sized)


def _walked_problem(value: object, *, sized: bool) -> Problem | None:
    """``_problem`` of a container, found by looking at every value it holds."""
    # Unsized, a value is walked whole for its text and depth: its rule sizes it after.
    max_values = MAX_ARGUMENT_VALUES if sized else sys.maxsize
    max_text_bytes = MAX_ARGUMENT_TEXT_BYTES if sized else sys.maxsize
    pending: list[tuple[object, int]] = [(value, 1)]
    values = text_bytes = 0
    while pending:
        container, depth = pending.pop()
        if depth > MAX_JSON_DEPTH:
            return "depth"
        children = _children(container, sized=sized) or ()
        # Counted before the children are looked at, so a huge list is refused at once.
        values += len(children)
        if values > max_values:
            return "size"
        for child in children:
            if isinstance(child, str):
                size = _text_bytes(child)
                if size is None:
                    return "text"
                text_bytes += size
                if text_bytes > max_text_bytes:
                    return "size"
            elif not isinstance(child, _LEAVES):
                pending.append((child, depth + 1))
    return None


_LEAVES: Final = (int, float, bytes, type(None))

_PLAIN_JSON: Final = (
    orjson.OPT_PASSTHROUGH_DATACLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_SUBCLASS
)
"""orjson refuses what is not plain JSON (a dataclass, a subclass of str or dict, a set), so
only values whose every text and container it writes pass the quick check."""
_NOT_STRUCTURE: Final = bytes(range(256)).translate(None, b'"[]{}')
_ARRAYS_AS_OBJECTS: Final = bytes.maketrans(b"[]", b"{}")
"""Depth does not care which kind a container is: one kind of bracket leaves one pair,
``{}``, to find."""
_TEXT: Final = re.compile(rb'"[^"]*"')


def _surely_storable(value: object) -> bool:
    """Whether a plain JSON value has no NUL, no lone surrogate and no container deeper than
    ``MAX_JSON_DEPTH``, proven in C where it can be; False means "walk it" (``_problem``).

    A session batch of 64 records is thousands of texts, which the walk looks at one by one
    (most of ``append_session_events``'s own time); orjson writes the batch in a fraction of
    that. It refuses a lone surrogate and writes NUL as ``\\u0000`` (a text that spells that
    out is walked, to be sure). Depth is read from the brackets outside texts: each pass
    removes the innermost containers, so a value ``MAX_JSON_DEPTH`` deep is gone after that
    many passes.
    """
    try:
        encoded = orjson.dumps(value, option=_PLAIN_JSON)
    except (TypeError, orjson.JSONEncodeError):
        return False
    if b"\\" in encoded:
        if b"\\u0000" in encoded:
            return False
        # Escaped backslashes, then escaped quotes, leave only the quotes that bound texts.
        encoded = encoded.replace(b"\\\\", b"").replace(b'\\"', b"")
    marks = encoded.translate(_ARRAYS_AS_OBJECTS, _NOT_STRUCTURE)
    shape = marks.replace(b'""', b"")
    if b'"' in shape:  # a text holding a bracket
        shape = _TEXT.sub(b"", marks)
    # Only brackets are left, so the innermost containers are exactly the adjacent pairs,
    # and ``replace`` removes those of the value it is given, not the pairs it uncovers.
    for _ in range(MAX_JSON_DEPTH):
        if b"{" not in shape:
            return True
        shape = shape.replace(b"{}", b"")
    return b"{" not in shape


def _children(item: object, *, sized: bool) -> Collection[object] | None:
    """What a container holds (an object's keys too); None for a value that holds nothing.

    Only containers that can be walked without consuming them: a generator passed as an
    argument is left to the rule that reads it.
    """
    if isinstance(item, dict):
        if sized and len(item) * 2 > MAX_ARGUMENT_VALUES:
            return range(len(item) * 2)  # too many to list; their count is enough
        return [part for pair in item.items() for part in pair]
    if isinstance(item, list | tuple | set | frozenset):
        return item
    if is_dataclass(item) and not isinstance(item, type):
        return [getattr(item, field.name) for field in fields(item)]
    return None


def _text_bytes(text: str) -> int | None:
    """The UTF-8 size of ``text``, or None when a backend cannot store it as it is.

    A lone surrogate has no UTF-8 form; NUL is valid Unicode, but PostgreSQL's text columns
    cannot hold it, and text must read back the same from every backend.
    """
    if "\x00" in text:
        return None
    if text.isascii():
        return len(text)
    try:
        return len(text.encode("utf-8"))
    except UnicodeEncodeError:
        return None
