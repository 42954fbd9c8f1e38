"""The commit function's typed arrays reach the server as exactly the values psycopg's own
list dumping sends: the same array type, the same elements, NULLs and empty arrays too."""

from __future__ import annotations

from typing import Any
from uuid import UUID, uuid4

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runledger.infrastructure.storage.binary_arrays import (
    BigintArray,
    BinaryArray,
    BooleanArray,
    ByteaArray,
    IntegerArray,
    TextArray,
    UuidArray,
)

pytestmark = pytest.mark.postgres

# PostgreSQL text holds no NUL; every other character, as UTF-8.
texts = st.text(st.characters(exclude_characters="\x00", exclude_categories=["Cs"]))
CASES: list[tuple[type[BinaryArray], str, st.SearchStrategy[Any]]] = [
    (BigintArray, "bigint[]", st.integers(-(2**63), 2**63 - 1)),
    (IntegerArray, "integer[]", st.integers(-(2**31), 2**31 - 1)),
    (BooleanArray, "boolean[]", st.booleans()),
    (TextArray, "text[]", texts),
    (ByteaArray, "bytea[]", st.binary()),
    (UuidArray, "uuid[]", st.uuids()),
]


@pytest.fixture(scope="module")
def connection(postgres_url: str) -> Any:
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        yield conn


def sent(connection: psycopg.Connection[Any], value: object, cast: str) -> tuple[Any, ...]:
    """What the server holds for ``value`` cast to ``cast``: the array and its text."""
    row = connection.execute(f"SELECT a, a::text FROM (SELECT %b::{cast} AS a) AS s", [value])
    found = row.fetchone()
    assert found is not None
    return tuple(found)


def declared(connection: psycopg.Connection[Any], value: BinaryArray) -> str:
    """The type the parameter itself declares (no cast)."""
    row = connection.execute("SELECT pg_typeof(%b)::text", [value]).fetchone()
    assert row is not None
    return str(row[0])


@pytest.mark.parametrize(("kind", "cast", "elements"), CASES, ids=[c[1] for c in CASES])
def test_each_array_reads_back_as_psycopgs_own_list_does(
    connection: psycopg.Connection[Any],
    kind: type[BinaryArray],
    cast: str,
    elements: st.SearchStrategy[Any],
) -> None:
    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
    @given(st.lists(st.one_of(st.none(), elements), max_size=8))
    def check(items: list[Any]) -> None:
        ours = sent(connection, kind(items), cast)
        assert ours[0] == items
        assert ours == sent(connection, items, cast)
        assert declared(connection, kind(items)) == cast

    check()


def test_an_empty_array_is_of_its_type(connection: psycopg.Connection[Any]) -> None:
    assert sent(connection, TextArray([]), "text[]") == ([], "{}")
    assert declared(connection, TextArray([])) == "text[]"
    assert declared(connection, BigintArray(())) == "bigint[]"


def test_uuids_may_come_as_their_hex_text(connection: psycopg.Connection[Any]) -> None:
    # SQLite's log keeps an aggregate id as 32 hex digits; a fence may carry it so.
    one = uuid4()
    assert sent(connection, UuidArray([one.hex, one]), "uuid[]")[0] == [one, one]
    assert isinstance(sent(connection, UuidArray([str(one)]), "uuid[]")[0][0], UUID)


def test_text_outside_ascii_goes_in_the_connections_encoding(
    connection: psycopg.Connection[Any],
) -> None:
    items = ["é", "日本", "emoji 🎉", 'quote " and backslash \\', "{braces}, commas"]
    assert sent(connection, TextArray(items), "text[]")[0] == items
