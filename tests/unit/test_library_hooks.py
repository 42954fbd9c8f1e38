"""The eventsourcing library's private hooks that runledger relies on are still there, as
they were when they were listed (``infrastructure/library_hooks.py``)."""

from __future__ import annotations

import inspect

import pytest

from runledger.infrastructure.library_hooks import HOOKS, LibraryHook

SIGNATURES: dict[tuple[str, str], str] = {
    ("BaseAggregate", "_create"): (
        "(event_class: 'type[CanInitAggregate[TAggregateID]]', *, "
        "id: 'TAggregateID | None' = None, **kwargs: 'Any') -> 'Self'"
    ),
    ("Application", "construct_mapper"): "(self) -> 'Mapper[TAggregateID]'",
    ("Application", "construct_recorder"): "(self) -> 'ApplicationRecorder'",
    ("Application", "construct_snapshot_store"): "(self) -> 'EventStore[TAggregateID]'",
    ("Application", "construct_repository"): "(self) -> 'Repository[TAggregateID]'",
    ("Repository", "_use_fastforward_lock"): "(self, aggregate_id: 'TAggregateID') -> 'Lock'",
    ("Repository", "_disuse_fastforward_lock"): "(self, aggregate_id: 'TAggregateID') -> 'None'",
    ("SQLiteConnectionPool", "_create_connection"): "(self) -> 'SQLiteConnection'",
    ("SQLiteApplicationRecorder", "_insert_events"): (
        "(self, c: 'SQLiteCursor', stored_events: 'Sequence[StoredEvent]', **_: 'Any') "
        "-> 'Sequence[int] | None'"
    ),
    ("SQLiteAggregateRecorder", "_insert_events"): (
        "(self, c: 'SQLiteCursor', stored_events: 'Sequence[StoredEvent]', **_: 'Any') "
        "-> 'Sequence[int] | None'"
    ),
    ("SQLiteApplicationRecorder", "construct_create_table_statements"): "(self) -> 'list[str]'",
    ("PostgresAggregateRecorder", "_create_table"): "(self, curs: 'Cursor[DictRow]') -> 'None'",
    ("PostgresAggregateRecorder", "_insert_stored_events"): (
        "(self, curs: 'Cursor[DictRow]', stored_events: 'Sequence[StoredEvent]', **_: 'Any') "
        "-> 'None'"
    ),
    ("PostgresDatastore", "get_connection"): "(self) -> 'Iterator[Connection[DictRow]]'",
    ("PostgresDatastore", "after_connect_func"): "(self) -> 'Callable[[Connection[Any]], None]'",
    ("PostgresDatastore", "register_type_adapters"): "(self) -> 'None'",
}
"""``str(inspect.signature(...))`` of each listed method in the installed library."""


def key(hook: LibraryHook) -> tuple[str, str]:
    return hook.owner.__qualname__, hook.name


def hook_id(hook: LibraryHook) -> str:
    return ".".join(key(hook))


def set_by_init(owner: type, name: str) -> bool:
    """Whether some ``__init__`` of the owner's classes assigns ``self.<name>``."""
    for cls in owner.__mro__:
        init = cls.__dict__.get("__init__")
        if init is None or not inspect.isfunction(init):
            continue
        source = inspect.getsource(init)
        if f"self.{name} =" in source or f"self.{name}:" in source:
            return True
    return False


METHODS = [hook for hook in HOOKS if hook.kind != "attribute"]
ATTRIBUTES = [hook for hook in HOOKS if hook.kind == "attribute"]


@pytest.mark.parametrize("hook", METHODS, ids=hook_id)
def test_a_listed_method_is_in_the_installed_library_with_its_signature(
    hook: LibraryHook,
) -> None:
    assert key(hook) in SIGNATURES, "record the signature of a newly listed hook"
    method = inspect.getattr_static(hook.owner, hook.name, None)
    assert method is not None, f"{hook_id(hook)} is gone from the installed eventsourcing"

    assert str(inspect.signature(getattr(hook.owner, hook.name))) == SIGNATURES[key(hook)]


@pytest.mark.parametrize("hook", ATTRIBUTES, ids=hook_id)
def test_a_listed_attribute_is_still_made_by_the_librarys_init(hook: LibraryHook) -> None:
    assert set_by_init(hook.owner, hook.name), (
        f"no __init__ of {hook.owner.__qualname__} sets {hook.name} any more"
    )


def test_every_recorded_signature_belongs_to_a_listed_hook() -> None:
    assert set(SIGNATURES) == {key(hook) for hook in METHODS}


def test_each_hook_is_listed_once_and_says_why() -> None:
    keys = [key(hook) for hook in HOOKS]

    assert len(keys) == len(set(keys))
    assert all(hook.why and hook.where for hook in HOOKS)


def test_a_hook_is_a_name_the_library_defines_not_one_of_ours() -> None:
    for hook in HOOKS:
        assert hook.owner.__module__.startswith("eventsourcing."), hook_id(hook)
