"""Canonical JSON exactly as upstream hashes it, and the digests derived from it.

Upstream (TypeScript) hashes JSON text with keys sorted by UTF-16 code units, no whitespace,
numbers formatted the JavaScript way and ``-0`` written as ``0``. Golden ids depend on every
byte, so this cannot be ``json.dumps(sort_keys=True)``: Python sorts by code point, writes
``1.0`` and ``1e-07`` where JavaScript writes ``1`` and ``1e-7``.
"""

from __future__ import annotations

import hashlib
import math
import re
from decimal import Decimal
from typing import Any, Final

import orjson

from runledger.domain.errors import (
    JsonIntegerTooLargeError,
    NonFiniteJsonNumberError,
    NotPlainJsonError,
)
from runledger.domain.json_strings import json_string


def sha256hex(text: str | bytes) -> str:
    """Lower-case hex SHA-256 of the UTF-8 bytes of ``text``."""
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    return hashlib.sha256(data).hexdigest()


def canonical_json(value: Any) -> str:
    """Serialise a plain JSON value the way upstream's canonicalJson does."""
    fast = _orjson_canonical(value)
    return fast.decode() if fast is not None else _written(value)


def json_digest(value: Any) -> str:
    """SHA-256 hex of the canonical JSON of ``value``."""
    fast = _orjson_canonical(value)
    return sha256hex(fast if fast is not None else _written(value))


def loaded_canonical_json(value: Any) -> bytes:
    """The canonical JSON, as UTF-8, of a value ``orjson.loads`` returned.

    Such a value holds nothing but exact dicts, lists, text, integers, finite floats, booleans
    and None, so the walk that ``canonical_json`` makes to refuse anything else (a UUID or an
    enum orjson would write as text, a NaN it would write as ``null``) is skipped: the audit
    chain canonicalises every event of a bundle this way, twice per export and verify.
    """
    fast = _orjson_text(value)
    return fast if fast is not None else _written(value).encode()


_OPTIONS: Final = (
    orjson.OPT_SORT_KEYS
    | orjson.OPT_STRICT_INTEGER
    | orjson.OPT_PASSTHROUGH_SUBCLASS
    | orjson.OPT_PASSTHROUGH_DATETIME
    | orjson.OPT_PASSTHROUGH_DATACLASS
)
"""Keys sorted by code point; integers past 2**53 (JavaScript rounds them), subclasses of the
plain types (an IntEnum, a str subclass), datetimes and dataclasses refused, not written."""
_JS_FLOAT_DIFFERS: Final = (
    re.compile(rb"\.0[,\]}]"),
    re.compile(rb"e(?:\+(?:1[6-9]|20)|-6)[,\]}]"),
)
"""orjson's float text differs from JavaScript's exactly when it ends in ``.0`` (``1.0``,
``-0.0``, ``100.0``) or carries an exponent that JavaScript writes out in full (``e+16`` to
``e+20``, ``e-6``); the property tests hold orjson to this. Inside an object or array a
delimiter follows every number; the same bytes inside a string only send the value to
``_written``. Each pattern starts with a literal, which the regex engine scans for in C."""
_ASTRAL: Final = re.compile(rb"[\xf0-\xf4]")
"""The lead byte of a character beyond U+FFFF: only with one can UTF-16 order differ."""
_NONE: Final = type(None)


def _orjson_canonical(value: Any) -> bytes | None:
    """The canonical JSON by orjson, for values where its output is byte-identical; else None.

    ``_orjson_text`` decides from orjson's own bytes; what it cannot see there is a value orjson
    writes although upstream refuses it (a UUID, an enum, an ``orjson.Fragment``, a NaN or an
    infinity), so the value is walked once for those, which also tells whether its bytes need
    looking at for floats.
    """
    floats = _floats_if_exact(value)
    return None if floats is None else _orjson_text(value, floats=floats)


def _orjson_text(value: Any, *, floats: bool = True) -> bytes | None:
    """orjson's text of a value of exact plain types, when it is upstream's to the byte.

    orjson writes text, ``null``, booleans and integers as JavaScript does, and sorts keys by
    code point, which is UTF-16 order unless a character beyond U+FFFF is present; a lone
    surrogate, a non-text key, an integer past 2**53 or nesting beyond orjson's limit make it
    refuse, and a float it writes otherwise than JavaScript shows in its bytes (unless the
    caller knows there is no float).
    """
    if type(value) is float:
        return None  # a bare number: no delimiter follows it
    try:
        text = orjson.dumps(value, option=_OPTIONS)
    except orjson.JSONEncodeError:
        return None
    if not text.isascii() and _ASTRAL.search(text) is not None:
        return None
    if floats and any(pattern.search(text) is not None for pattern in _JS_FLOAT_DIFFERS):
        return None
    return text


def _floats_if_exact(value: Any) -> bool | None:
    """None unless ``value`` holds only exact plain types and finite floats; else whether it
    holds a float."""
    floats = False
    pending = [value]
    pop, extend = pending.pop, pending.extend
    while pending:
        item = pop()
        kind = type(item)
        # Leaves first: they are most of any value (a quarter faster than containers first).
        if kind is str or kind is int or kind is _NONE or kind is bool:
            continue
        if kind is dict:
            extend(item.values())
        elif kind is list or kind is tuple:
            extend(item)
        elif kind is float:
            if not math.isfinite(item):
                return None
            floats = True
        else:
            return None
    return floats


def _written(value: Any) -> str:
    """The canonical JSON written out rule by rule: every value, and the reference."""
    parts: list[str] = []
    _write(value, parts)
    return "".join(parts)


def check_plain_json(value: Any, name: str) -> None:
    """Raise the upstream error if ``value`` is not a plain, finite JSON value, naming the
    argument ``name`` and the path inside it where the offending value is."""
    try:
        canonical_json(value)
    except (NotPlainJsonError, NonFiniteJsonNumberError, JsonIntegerTooLargeError) as error:
        raise type(error)(locate_unplain(value, name)) from None


def locate_unplain(value: Any, name: str) -> str | None:
    """Where in ``value`` (the argument ``name``) the first value that is no canonical JSON
    is, in the order ``canonical_json`` writes, and what it is: ``input.when is a datetime``."""
    pending: list[tuple[Any, str]] = [(value, name)]
    while pending:
        item, path = pending.pop()
        if item is None or isinstance(item, bool | str):
            continue
        if isinstance(item, int):
            if not -(2**63) <= item < 2**64:
                return f"{path} is an integer of {item.bit_length()} bits"
        elif isinstance(item, float):
            if not math.isfinite(item):
                return f"{path} is {item!r}"
        elif isinstance(item, dict):
            odd = [key for key in item if not isinstance(key, str)]
            if odd:
                return f"{path} has a key of type {type(odd[0]).__name__}"
            keys = sorted(item, key=_utf16_key, reverse=True)
            pending.extend((item[key], _member(path, key)) for key in keys)
        elif isinstance(item, list | tuple):
            pending.extend((item[i], f"{path}[{i}]") for i in reversed(range(len(item))))
        else:
            return f"{path} is {_article(type(item).__name__)}"
    return None


def _member(path: str, key: str) -> str:
    return f"{path}.{key}" if key.isidentifier() else f"{path}[{json_string(key)}]"


def _article(noun: str) -> str:
    return f"an {noun}" if noun[:1].lower() in "aeiou" else f"a {noun}"


def _write(value: Any, parts: list[str]) -> None:
    if value is None:
        parts.append("null")
    elif value is True:
        parts.append("true")
    elif value is False:
        parts.append("false")
    elif isinstance(value, str):
        parts.append(json_string(value))
    elif isinstance(value, int):
        if not -(2**63) <= value < 2**64:
            # The stored form (orjson) holds 64-bit integers only.
            raise JsonIntegerTooLargeError()
        # JavaScript numbers are doubles: past 2**53 they round and may print as 1e+21.
        parts.append(str(value) if abs(value) < 2**53 else js_number(float(value)))
    elif isinstance(value, float):
        parts.append(js_number(value))
    elif isinstance(value, dict):
        keys = list(value)
        if not all(isinstance(key, str) for key in keys):
            raise NotPlainJsonError()
        parts.append("{")
        for index, key in enumerate(sorted(keys, key=_utf16_key)):
            if index:
                parts.append(",")
            parts.append(json_string(key))
            parts.append(":")
            _write(value[key], parts)
        parts.append("}")
    elif isinstance(value, (list, tuple)):
        parts.append("[")
        for index, item in enumerate(value):
            if index:
                parts.append(",")
            _write(item, parts)
        parts.append("]")
    else:
        raise NotPlainJsonError()


def _utf16_key(key: str) -> bytes:
    return key.encode("utf-16-be", "surrogatepass")


def js_number(number: float) -> str:
    """Format a float as JavaScript's Number.prototype.toString would."""
    if not math.isfinite(number):
        raise NonFiniteJsonNumberError()
    if number == 0:
        return "0"
    sign = "-" if number < 0 else ""
    # repr gives the shortest round-tripping digits, the same digits JavaScript picks.
    _, digit_tuple, exponent = Decimal(repr(abs(number))).as_tuple()
    digits = "".join(map(str, digit_tuple)).rstrip("0") or "0"
    trailing_zeros = len(digit_tuple) - len(digits)
    exponent = int(exponent)  # an int for every finite float
    k = len(digits)
    n = exponent + trailing_zeros + k  # value == 0.digits * 10**n
    if k <= n <= 21:
        body = digits + "0" * (n - k)
    elif 0 < n <= 21:
        body = f"{digits[:n]}.{digits[n:]}"
    elif -6 < n <= 0:
        body = "0." + "0" * (-n) + digits
    else:
        power = n - 1
        mantissa = digits if k == 1 else f"{digits[0]}.{digits[1:]}"
        body = f"{mantissa}e{'+' if power >= 0 else '-'}{abs(power)}"
    return sign + body
