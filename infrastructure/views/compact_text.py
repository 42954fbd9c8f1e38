"""How a ``compact`` view column keeps its text: the ids and times the domain makes, as the
bytes they stand for.

A read model of the bench history spent a third of its PostgreSQL bytes on text that is
mostly hex or a time: ``workflow-message-`` and 64 hex digits is 81 bytes, where the digest
it names is 32; ``2026-01-01T00:00:00.005000+00:00`` is 32, where its microseconds are 8.
Each stored value is one marker byte and then:

- ``TEXT`` (0): the text's UTF-8, for any text the other forms do not hold;
- ``TIME`` (1): a UTC time, as ``datetime.isoformat`` writes it, in 8 bytes (microseconds
  since 1970, signed, big-endian);
- ``HEX`` (2): one byte naming a prefix of ``PREFIXES`` and the bytes of the lowercase hex
  after it (a digest, or an id the domain derives from one).

A text takes the first of TIME and HEX that gives it back exactly, else TEXT, so each text
has one stored form: equal texts are equal bytes, and a key or an ``equals`` of a query
matches by its stored form. The order of stored forms is not the texts' order: a compact
column is never a query's ``order_by``. The forms and the prefixes' numbers are stored
data: a change to either is a new projection version.
"""

from __future__ import annotations

import re
from datetime import UTC, date, datetime, timedelta
from functools import lru_cache
from typing import Final

TEXT: Final = 0
TIME: Final = 1
HEX: Final = 2

PREFIXES: Final = (
    "",
    "workflow-message-",
    "follow-up-",
    "workflow-turn-",
    "decision-",
    "continuation-",
    "restart-",
)
"""The prefixes a ``HEX`` value may have, by their stored number: ``domain.ids``'s."""
_PREFIX_NUMBERS: Final = {prefix: number for number, prefix in enumerate(PREFIXES)}

_EPOCH: Final = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND: Final = timedelta(microseconds=1)
_EPOCH_DAY: Final = _EPOCH.toordinal()
_TIME_SHAPE: Final = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d{6})?\+00:00", re.ASCII)
CACHED: Final = 4_096
"""Texts and stored forms each function remembers (about 1 MB when full). A row's ids and
times recur within it and across its tables (a message's id, its follow-up's id, a time
written as created and updated): in a rebuild of the bench history 46 % of calls hit with
4,096 kept, 49 % with 32,768."""
_TIME_LENGTHS: Final = frozenset((25, 32))
"""``isoformat``'s lengths for a UTC time with and without microseconds."""
FIRST_MICROS: Final = -62_135_596_800_000_000
"""0001-01-01T00:00:00+00:00: the first time ``datetime`` holds."""
LAST_MICROS: Final = 253_402_300_799_999_999
"""9999-12-31T23:59:59.999999+00:00: the last."""


class CompactTextError(ValueError):
    """Stored bytes that are none of the forms: refused, never read as some other text."""


@lru_cache(maxsize=CACHED)
def compact(text: str) -> bytes:
    """The stored form of ``text``."""
    return _as_time(text) or _as_hex(text) or bytes((TEXT,)) + text.encode("utf-8", "surrogatepass")


@lru_cache(maxsize=CACHED)
def expanded(stored: bytes) -> str:
    """The text a stored form holds; ``CompactTextError`` for bytes of no form."""
    if not stored:
        raise CompactTextError("an empty compact value")
    marker = stored[0]
    if marker == TEXT:
        try:
            return stored[1:].decode("utf-8", "surrogatepass")
        except UnicodeDecodeError as error:
            raise CompactTextError(f"compact text that is not UTF-8: {error}") from None
    if marker == TIME:
        if len(stored) != 9:
            raise CompactTextError(f"a compact time of {len(stored) - 1} bytes, not 8")
        micros = int.from_bytes(stored[1:], "big", signed=True)
        try:
            return (_EPOCH + micros * _MICROSECOND).isoformat()
        except OverflowError:
            raise CompactTextError(f"a compact time out of range: {micros}") from None
    if marker == HEX:
        if len(stored) < 3 or stored[1] >= len(PREFIXES):
            raise CompactTextError("a compact hex value without a known prefix or digits")
        return PREFIXES[stored[1]] + stored[2:].hex()
    raise CompactTextError(f"a compact value of unknown form {marker}")


def _as_time(text: str) -> bytes | None:
    """The TIME form of a text that ``expanded`` gives back from it, else None.

    Read field by field rather than by ``datetime.fromisoformat``, which takes other
    spellings too and had to be checked by writing the time again: each new time of a
    rebuild is made once, and that was 2 µs of it."""
    if len(text) not in _TIME_LENGTHS or _TIME_SHAPE.fullmatch(text) is None:
        return None
    days = _days(text[:10])
    hour, minute, second = int(text[11:13]), int(text[14:16]), int(text[17:19])
    if days is None or hour > 23 or minute > 59 or second > 59:
        return None
    fraction = int(text[20:26]) if len(text) == 32 else 0
    if len(text) == 32 and fraction == 0:
        return None  # ``isoformat`` leaves a fraction of zero out
    micros = (days * 86_400 + hour * 3_600 + minute * 60 + second) * 1_000_000 + fraction
    return bytes((TIME,)) + micros.to_bytes(8, "big", signed=True)


@lru_cache(maxsize=1024)
def _days(day: str) -> int | None:
    """Days from 1970-01-01 to a ``YYYY-MM-DD`` date, or None for no such date."""
    try:
        return date.fromisoformat(day).toordinal() - _EPOCH_DAY
    except ValueError:
        return None


def _as_hex(text: str) -> bytes | None:
    """The HEX form of a text that ``expanded`` gives back from it, else None."""
    # Each prefix but the empty one ends in a dash, and hex digits hold none.
    head, dash, digits = text.rpartition("-")
    number = _PREFIX_NUMBERS.get(head + dash)
    if number is None or len(digits) < 2 or len(digits) % 2:
        return None
    try:
        value = bytes.fromhex(digits)
    except ValueError:
        return None
    # ``fromhex`` takes capitals and spaces too, which ``expanded`` would not give back.
    if value.hex() != digits:
        return None
    return bytes((HEX, number)) + value
