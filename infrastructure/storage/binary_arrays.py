"""One-dimensional PostgreSQL arrays of a declared element type, sent in binary.

psycopg dumps a Python list by first walking it for an element to choose the array's type
(and, for integers, the smallest type every element fits), then dumping each element: for
the commit function's two dozen short arrays that was a sixth of the client's time per
command (py-spy --gil, P1 and P10 on PostgreSQL). The commit declares each array's type
anyway, so these arrays carry it and are written in one pass, in PostgreSQL's binary array
format (``array_send``): dimensions, a null flag, the element type, then each element as
its length (-1 for NULL) and its bytes.

The server reads back exactly the values psycopg would have sent: the same element types
the commit casts to, the same bytes for each element.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any, ClassVar, Final
from uuid import UUID

import psycopg
from psycopg.abc import AdaptContext
from psycopg.adapt import Dumper
from psycopg.pq import Format

_NULL: Final = b"\xff\xff\xff\xff"
_HEADER: Final = struct.Struct(">iiiii")
_EMPTY: Final = struct.Struct(">iii")
_LENGTHS: Final = {width: width.to_bytes(4, "big") for width in (1, 4, 8, 16)}


class BinaryArray:
    """A list of values of one element type, for a parameter cast to that array type."""

    __slots__ = ("items",)
    element_oid: ClassVar[int]
    array_oid: ClassVar[int]

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = items

    def binary(self, encoding: str) -> bytes:
        items = self.items
        if not items:
            return _EMPTY.pack(0, 0, self.element_oid)
        parts: list[bytes] = []
        nulls = 0
        for item in items:
            if item is None:
                parts.append(_NULL)
                nulls = 1
            else:
                parts.extend(self.element(item, encoding))
        return _HEADER.pack(1, nulls, self.element_oid, len(items), 1) + b"".join(parts)

    @staticmethod
    def element(item: Any, encoding: str) -> Iterable[bytes]:
        """An element's length and bytes (text in the connection's ``encoding``)."""
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.items!r})"


class _Integers(BinaryArray):
    __slots__ = ()
    width: ClassVar[int]

    @classmethod
    def element(cls, item: int, _encoding: str) -> Iterable[bytes]:
        return _LENGTHS[cls.width], item.to_bytes(cls.width, "big", signed=True)


class BigintArray(_Integers):
    __slots__ = ()
    element_oid, array_oid, width = 20, 1016, 8


class IntegerArray(_Integers):
    __slots__ = ()
    element_oid, array_oid, width = 23, 1007, 4


class BooleanArray(BinaryArray):
    __slots__ = ()
    element_oid, array_oid = 16, 1000
    _TRUE: Final = (_LENGTHS[1], b"\x01")
    _FALSE: Final = (_LENGTHS[1], b"\x00")

    @staticmethod
    def element(item: bool, _encoding: str) -> Iterable[bytes]:
        return BooleanArray._TRUE if item else BooleanArray._FALSE


class TextArray(BinaryArray):
    __slots__ = ()
    element_oid, array_oid = 25, 1009

    @staticmethod
    def element(item: str, encoding: str) -> Iterable[bytes]:
        data = item.encode(encoding)
        return len(data).to_bytes(4, "big"), data


class ByteaArray(BinaryArray):
    __slots__ = ()
    element_oid, array_oid = 17, 1001

    @staticmethod
    def element(item: bytes, _encoding: str) -> Iterable[bytes]:
        return len(item).to_bytes(4, "big"), item


class UuidArray(BinaryArray):
    __slots__ = ()
    element_oid, array_oid = 2950, 2951

    @staticmethod
    def element(item: UUID | str, _encoding: str) -> Iterable[bytes]:
        # An id read back from SQLite's log is its hex text.
        return _LENGTHS[16], (item if type(item) is UUID else UUID(str(item))).bytes


def _dumper(kind: type[BinaryArray]) -> type[Dumper]:
    class ArrayDumper(Dumper):
        format = Format.BINARY
        oid = kind.array_oid

        def __init__(self, cls: type, context: AdaptContext | None = None) -> None:
            super().__init__(cls, context)
            # As psycopg's own text dumpers: SQL_ASCII is taken as UTF-8.
            encoding = "utf-8" if self.connection is None else self.connection.info.encoding
            self._encoding = "utf-8" if encoding == "ascii" else encoding

        def dump(self, obj: Any) -> bytes:
            data: bytes = obj.binary(self._encoding)
            return data

    ArrayDumper.__name__ = f"{kind.__name__}Dumper"
    return ArrayDumper


for _kind in (BigintArray, IntegerArray, BooleanArray, TextArray, ByteaArray, UuidArray):
    psycopg.adapters.register_dumper(_kind, _dumper(_kind))
