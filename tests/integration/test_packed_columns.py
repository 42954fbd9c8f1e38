"""A view column kept packed (``packed``: the session outbox's message content) stores zstd
bytes and reads back the JSON it was given, on memory, SQLite and PostgreSQL; a store whose
outbox was written at version 1 (content as JSON text) upgrades on open with its digest, and
its bundles, unchanged; damaged bytes are refused, never read as something else."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from runledger.domain.packed_state import UnpackError, packed, unpacked
from runledger.domain.values import Actor
from runledger.infrastructure import open_store, verify_bundle
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.store import decode_row
from runledger.projections import session_outbox
from runledger.projections.base import Table
from runledger.projections.session_outbox import MESSAGES, SessionOutboxProjection
from tests.support.audit import read_lines, write_lines

SESSION = "pi-packed"
PROMPT = "Follow-up {n}: compare the packed outbox with the one it replaced. " * 3


def queue(store: WorkflowStore, run_id: str, count: int) -> None:
    store.create_run(run_id, workflow_name="packed", input={})
    store.bind_origin_session(run_id, SESSION)
    for number in range(count):
        store.queue_follow_up(
            run_id,
            request_id=f"{run_id}-{number}",
            target_session_id=SESSION,
            actor=Actor("session", SESSION),
            source="pi-session",
            prompt=PROMPT.format(n=number),
        )


def stored_contents(runtime: StoreRuntime, column: str = "content") -> list[Any]:
    slot = runtime.views.registry(SessionOutboxProjection.name).active
    assert slot is not None
    rows = runtime.views.raw_rows(MESSAGES.name, slot)
    assert rows is not None
    return [row[column] for row in rows]


def test_message_content_is_stored_packed_and_reads_back_as_written(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    queue(store, "run-1", 3)

    outbox = store.session_outbox(SESSION)
    stored = stored_contents(runtime)

    assert [message.content["content"] for message in outbox] == [
        PROMPT.format(n=number) for number in range(3)
    ]
    assert len(stored) == 3
    # One zstd frame behind packed_state's marker, a fraction of the JSON it holds.
    assert all(type(value) is bytes and value[0] == 1 for value in stored)
    row = decode_row(
        MESSAGES, {name: None for name in MESSAGES.column_names} | {"content": stored[0]}
    )
    assert row["content"] in [message.content for message in outbox]


def test_a_value_packing_would_not_shrink_is_kept_as_its_json_and_reads_back() -> None:
    from runledger.infrastructure.views.store import encode_row

    row = {name: None for name in MESSAGES.column_names} | {
        "workflow_message_id": "m",
        "content": 7,
    }

    encoded = encode_row(MESSAGES, row)

    assert encoded["content"] == b"7"
    assert decode_row(MESSAGES, dict(encoded)) == row


def _version_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session outbox as version 1 declared it: content as JSON text, ids and times as
    text."""
    tables = []
    for table in SessionOutboxProjection.tables:
        columns = tuple(
            (name, "json" if kind == "packed" else "text" if kind == "compact" else kind)
            for name, kind in table.columns
        )
        earlier = dataclasses.replace(table, columns=columns)
        monkeypatch.setattr(session_outbox, _declared_name(table), earlier)
        tables.append(earlier)
    monkeypatch.setattr(SessionOutboxProjection, "tables", tuple(tables))
    monkeypatch.setattr(SessionOutboxProjection, "version", 1)
    monkeypatch.setattr(SessionOutboxProjection, "same_rows_since", None)


def _declared_name(table: Table) -> str:
    """The name ``session_outbox`` declares ``table`` under."""
    [name] = [name for name, value in vars(session_outbox).items() if value is table]
    return name


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ]
)
def new_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A store no code has opened yet (``postgres_store_url``'s has this code's tables)."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'runledger.db'}"
        return
    server = request.getfixturevalue("postgres_server")
    name = server.new_database_name()
    try:
        yield server.create_database(name)
    finally:
        server.drop_database(name)


def test_an_outbox_of_version_1_upgrades_on_open_and_keeps_its_digest_and_bundles(
    new_url: str, tmp_path: Path
) -> None:
    durable_url = new_url
    bundle = tmp_path / "run-1.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        _version_1(patch)
        with open_store(durable_url) as store:
            queue(store, "run-1", 4)
            before = store.read_model_digest(SessionOutboxProjection.name)
            outbox_before = store.session_outbox(SESSION)
            store.export_run("run-1", bundle)
        with open_runtime(durable_url) as runtime:
            assert all(type(value) is str for value in stored_contents(runtime))
            ids = stored_contents(runtime, "workflow_message_id")
            assert all(type(value) is str for value in ids)

    with open_runtime(durable_url) as runtime:
        status = {state.name: state for state in runtime.projection_status()}
        contents = stored_contents(runtime)
        ids_after = stored_contents(runtime, "workflow_message_id")
        store = WorkflowStore(runtime)
        after = store.read_model_digest(SessionOutboxProjection.name)
        outbox_after = store.session_outbox(SESSION)

    assert (status["session_outbox"].version, status["session_outbox"].lag) == (3, 0)
    assert all(type(value) is bytes for value in contents)
    assert all(type(value) is bytes for value in ids_after)
    assert after == before
    assert outbox_after == outbox_before
    assert read_lines(bundle)[-1]["read_models"]["session_outbox"]["version"] == 1
    assert verify_bundle(bundle).ok


@pytest.mark.parametrize(
    ("declared", "readable"),
    [
        (0, "versions 1 to 3"),
        (4, "versions 1 to 3"),
        ("2", "versions 1 to 3"),
        (True, "versions 1 to 3"),
    ],
)
def test_a_bundle_digested_at_a_version_whose_rows_differ_is_refused(
    store: WorkflowStore, tmp_path: Path, declared: object, readable: str
) -> None:
    queue(store, "run-1", 2)
    path = tmp_path / "run-1.jsonl"
    store.export_run("run-1", path)
    lines = read_lines(path)
    assert lines[-1]["read_models"]["session_outbox"]["version"] == 3
    for earlier in (1, 2):
        lines[-1]["read_models"]["session_outbox"]["version"] = earlier
        write_lines(path, lines)
        assert verify_bundle(path).ok, f"version {earlier}'s rows are version 3's"

    lines[-1]["read_models"]["session_outbox"]["version"] = declared
    write_lines(path, lines)
    verdict = verify_bundle(path)

    assert (verdict.ok, verdict.problem) == (False, "digest")
    assert verdict.detail == (
        f"session_outbox was digested at version {declared!r}, "
        f"but this runledger checks the digests of {readable}"
    )


def test_a_model_without_earlier_rows_checks_only_its_own_version(
    store: WorkflowStore, tmp_path: Path
) -> None:
    queue(store, "run-1", 1)
    path = tmp_path / "run-1.jsonl"
    store.export_run("run-1", path)
    lines = read_lines(path)
    version = lines[-1]["read_models"]["runs"]["version"]
    lines[-1]["read_models"]["runs"]["version"] = version + 1
    write_lines(path, lines)

    verdict = verify_bundle(path)

    assert verdict.detail == (
        f"runs was digested at version {version + 1}, "
        f"but this runledger checks the digests of version {version}"
    )


@pytest.mark.parametrize("damage", [b"\x01not a zstd frame", b"\x01"])
def test_damaged_packed_content_is_refused_not_read_as_something_else(
    durable_url: str, damage: bytes
) -> None:
    with open_store(durable_url) as store:
        queue(store, "run-1", 1)
    with open_runtime(durable_url) as runtime:
        slot = runtime.views.registry(SessionOutboxProjection.name).active
        assert slot is not None
        table = runtime.views.physical_name(MESSAGES, slot)
        mark = "?" if durable_url.startswith("sqlite") else "%s"
        with runtime.views._transaction() as cursor:  # type: ignore[attr-defined]
            cursor.execute(f'UPDATE "{table}" SET content = {mark}', (damage,))
        with pytest.raises(UnpackError):
            WorkflowStore(runtime).session_outbox(SESSION)


def _rewrite_live_contents(runtime: StoreRuntime, change: Callable[[bytes], bytes]) -> None:
    """Store each live message's content as ``change(the JSON it holds)`` makes it."""
    views: Any = runtime.views
    slot = views.registry(SessionOutboxProjection.name).active
    physical = views.physical_name(MESSAGES, slot)
    rows = views.raw_rows(MESSAGES.name, slot)
    assert rows
    if hasattr(views, "_tables"):  # memory: the slot's rows as stored, by key
        for row in views._tables[physical].values():
            row["content"] = change(unpacked(row["content"]))
        return
    with views._transaction() as cursor:
        for row in rows:
            cursor.execute(
                views.dialect.sql(
                    "UPDATE {} SET content = {mark} WHERE workflow_message_id = {mark}",
                    views.dialect.table(physical),
                ),
                (change(unpacked(row["content"])), row["workflow_message_id"]),
            )


def test_a_rebuild_compares_packed_content_by_the_json_it_holds(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    queue(store, "run-1", 3)
    # As another zstd release might pack them: other bytes, the same JSON (here the JSON
    # itself, the other form packed_state reads).
    _rewrite_live_contents(runtime, lambda json: json)

    [same] = runtime.rebuild_blue_green([SessionOutboxProjection.name])
    # A real change in the live copy is still one: each message's content edited.
    _rewrite_live_contents(runtime, lambda json: packed(json.replace(b"compare", b"COMPARE")))
    [changed] = runtime.rebuild_blue_green([SessionOutboxProjection.name])

    assert (same.compared, same.equal, same.switched) == ("rows", True, True)
    assert (changed.compared, changed.equal, changed.switched) == ("rows", False, False)
    assert {diff.table: diff.changed for diff in changed.tables}[MESSAGES.name] == 3
    assert len(changed.first_differences) == 3
