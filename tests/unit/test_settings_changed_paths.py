"""``settings.changed`` version 2 records the JSON pointers a change wrote."""

from __future__ import annotations

from runledger.domain.settings_policy import changed_paths


def test_each_writing_operation_names_its_path_once_in_patch_order() -> None:
    patch = [
        {"op": "replace", "path": "/mode", "value": "strict"},
        {"op": "add", "path": "/notes/-", "value": "a"},
        {"op": "add", "path": "/notes/-", "value": "b"},
        {"op": "remove", "path": "/limits/old"},
    ]

    assert changed_paths(patch) == ["/mode", "/notes/-", "/limits/old"]


def test_a_move_writes_where_it_came_from_and_where_it_went() -> None:
    assert changed_paths([{"op": "move", "from": "/a", "path": "/b"}]) == ["/a", "/b"]


def test_a_copy_writes_only_its_target() -> None:
    assert changed_paths([{"op": "copy", "from": "/a", "path": "/b"}]) == ["/b"]


def test_a_test_operation_writes_nothing() -> None:
    assert changed_paths([{"op": "test", "path": "/mode", "value": "x"}]) == []
