"""The row hashes a blue/green rebuild compares two copies by: kept in a temporary file, not
in memory, and telling the same added, removed and changed rows as the rows themselves."""

from __future__ import annotations

from runledger.infrastructure.views.compare import compare_hashes, keys_of, row_hashes
from runledger.projections.base import Table

TABLE = Table(
    "things",
    (("area", "text"), ("number", "int"), ("body", "json"), ("done", "bool")),
    ("area", "number"),
    owner=None,
)
LIVE = [
    ("a", 1, '{"x":1}', 0),
    ("a", 2, '{"x":2}', 1),
    ("b", 1, "null", None),
    ("b", 2, '"gone"', 0),
]


def test_equal_copies_differ_nowhere() -> None:
    hashes = row_hashes(TABLE, LIVE)
    try:
        compared = compare_hashes(TABLE, hashes, reversed(LIVE), limit=5)
    finally:
        hashes.close()

    assert (compared.diff.added, compared.diff.removed, compared.diff.changed) == (0, 0, 0)
    assert compared.differing == []


def test_added_changed_and_removed_rows_are_counted_and_named_in_the_rebuilt_order() -> None:
    rebuilt = [
        ("c", 9, "{}", 1),  # added
        ("a", 1, '{"x":1}', 0),
        ("a", 2, '{"x":3}', 1),  # changed
        ("b", 1, "null", 0),  # changed: a null became 0
    ]
    hashes = row_hashes(TABLE, LIVE)
    try:
        compared = compare_hashes(TABLE, hashes, rebuilt, limit=2)
        removed = keys_of(TABLE, LIVE, compared.removed, limit=5)
    finally:
        hashes.close()

    assert (compared.diff.added, compared.diff.removed, compared.diff.changed) == (1, 1, 2)
    assert compared.differing == [["c", 9], ["a", 2]]
    assert removed == [["b", 2]]


def test_a_value_stored_as_another_type_is_a_change() -> None:
    hashes = row_hashes(TABLE, [("a", 1, "1", 1)])
    try:
        compared = compare_hashes(TABLE, hashes, [("a", 1, "1", True)], limit=5)
    finally:
        hashes.close()

    assert compared.diff.changed == 1


PACKED = Table(
    "messages",
    (("id", "text"), ("content", "packed")),
    ("id",),
    owner=None,
)


def test_a_packed_value_compares_as_the_json_it_holds_and_a_changed_one_still_differs() -> None:
    from runledger.domain.packed_state import packed

    content = (
        b'{"schema":"pi-workflows.workflow-message-content.v1","content":"' + b"x" * 300 + b'"}'
    )
    frame = packed(content)
    assert frame[0] == 1, "the content is packed"
    # The live copy of an earlier version kept the JSON as text, the rebuilt one packs it.
    hashes = row_hashes(PACKED, [("m1", content.decode()), ("m2", content.decode())])
    try:
        compared = compare_hashes(
            PACKED, hashes, [("m1", frame), ("m2", packed(content.replace(b"x", b"y")))], limit=5
        )
    finally:
        hashes.close()

    assert (compared.diff.added, compared.diff.removed, compared.diff.changed) == (0, 0, 1)
    assert compared.differing == [["m2"]]
