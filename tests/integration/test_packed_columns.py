"""A view column kept packed (``packed``: the session outbox's message content, a viewer
revision's deltas) stores zstd bytes and reads back the JSON it was given, on memory, SQLite
and PostgreSQL; JSON under ``PACK_FROM`` bytes is kept as its bytes; a store whose outbox was
written at version 1 (content as JSON text), or whose viewer deltas at version 5, upgrades on
open with its digest, and its bundles, unchanged; damaged bytes are refused, never read as
something else."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest

from runledger.domain.packed_state import UnpackError, packed, unpacked
from runledger.domain.records import ViewerDeltas
from runledger.domain.values import Actor
from runledger.infrastructure import open_store, verify_bundle
from runledger.infrastructure.audit.reprojection import reproject
from runledger.infrastructure.audit.stored_events import log_entry, run_notifications
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.store import PACK_FROM, decode_row, encode_row
from runledger.projections import session_outbox, viewer_deltas
from runledger.projections.base import ColumnType, Projection, Table
from runledger.projections.session_outbox import MESSAGES, SessionOutboxProjection
from runledger.projections.viewer_deltas import REVISIONS, ViewerDeltasProjection
from tests.support import scenario
from tests.support.audit import read_lines, write_lines
from tests.support.sessions import session_binding, session_events

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


def record_session(store: WorkflowStore, run_id: str, batches: int, size: int) -> None:
    """A run recording ``batches`` batches of ``size`` session events."""
    scenario.create(store, run_id)
    store.record_session_binding(run_id, session_binding(run_id, SESSION))
    for batch in range(batches):
        store.append_session_events(run_id, session_events(batch * size + 1, size))


def stored_contents(runtime: StoreRuntime, column: str = "content") -> list[Any]:
    return [row[column] for row in stored_rows(runtime, SessionOutboxProjection, MESSAGES)]


def stored_rows(
    runtime: StoreRuntime, projection: type[Projection], table: Table
) -> list[dict[str, Any]]:
    slot = runtime.views.registry(projection.name).active
    assert slot is not None
    rows = runtime.views.raw_rows(table.name, slot)
    assert rows is not None
    return rows


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
    row = {name: None for name in MESSAGES.column_names} | {
        "workflow_message_id": "m",
        "content": 7,
    }

    encoded = encode_row(MESSAGES, row)

    assert encoded["content"] == b"7"
    assert decode_row(MESSAGES, dict(encoded)) == row


@pytest.mark.parametrize("size", [PACK_FROM - 1, PACK_FROM])
def test_json_under_pack_from_bytes_is_kept_as_its_bytes_and_from_there_packed(
    size: int,
) -> None:
    text = "a" * (size - 2)  # its JSON: the text and two quotes
    row = {name: None for name in MESSAGES.column_names} | {
        "workflow_message_id": "m",
        "content": text,
    }

    stored = encode_row(MESSAGES, row)["content"]

    assert len(orjson.dumps(text)) == size
    assert stored == (packed(orjson.dumps(text)) if size >= PACK_FROM else orjson.dumps(text))
    assert (stored[0] == 1) is (size >= PACK_FROM)
    assert decode_row(MESSAGES, {**row, "content": stored}) == row


def test_a_revision_of_many_session_events_is_stored_packed_and_reads_back(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    record_session(store, "run-1", 2, 64)

    rows = stored_rows(runtime, ViewerDeltasProjection, REVISIONS)
    stored = {row["revision"]: row["deltas"] for row in rows}
    page = store.viewer_deltas("run-1", after_revision=1)

    assert isinstance(page, ViewerDeltas)
    assert sorted(stored) == sorted({delta.presentation_revision for delta in page.deltas})
    assert all(type(value) is bytes for value in stored.values())
    held = {revision: unpacked(value) for revision, value in stored.items()}
    for revision, value in stored.items():
        assert (value[0] == 1) is (len(held[revision]) >= PACK_FROM)
    # Each batch's revision holds its 64 events: kilobytes, packed to a fraction.
    for revision in sorted(stored)[-2:]:
        assert len(held[revision]) > 4_000
        assert len(stored[revision]) < len(held[revision]) / 4
    appended = [
        item["seq"]
        for delta in page.deltas
        if delta.target_key == "session:tail"
        for op in delta.patch
        if op["op"] == "append"
        for item in op["value"]
    ]
    assert appended == list(range(1, 129))


def test_a_scratch_reprojection_keeps_its_packed_columns_as_json_and_gives_the_live_digest(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    """Re-projected in memory for its digests only (an export, a verify-bundle, a restore's
    checks), a revision is not compressed: its JSON bytes are a form every reader takes."""
    record_session(store, "run-1", 2, 64)
    entries = [log_entry(n) for n in run_notifications(runtime.storage, ["run-1"])]

    fresh = reproject(entries, [ViewerDeltasProjection()])

    slot = fresh.views.registry(ViewerDeltasProjection.name).active
    assert slot is not None
    scratch = fresh.views.raw_rows(REVISIONS.name, slot)
    live = stored_rows(runtime, ViewerDeltasProjection, REVISIONS)
    assert scratch is not None
    assert {row["revision"] for row in scratch} == {row["revision"] for row in live}
    large = [row["deltas"] for row in scratch if len(row["deltas"]) >= PACK_FROM]
    assert large, "the batches' revisions are kilobytes of JSON"
    # Each is the JSON list of the revision's deltas itself: zstd bytes would not parse.
    assert all(type(orjson.loads(value)) is list for value in large)
    # The live store packs the same revisions.
    assert all(row["deltas"][0] == 1 for row in live if len(unpacked(row["deltas"])) >= PACK_FROM)
    assert fresh.digests()[ViewerDeltasProjection.name]["digest"] == store.read_model_digest(
        ViewerDeltasProjection.name
    )


def _version_1(monkeypatch: pytest.MonkeyPatch) -> None:
    """The session outbox as version 1 declared it: content as JSON text, ids and times as
    text."""
    _declared_as(
        monkeypatch,
        session_outbox,
        SessionOutboxProjection,
        1,
        {"packed": "json", "compact": "text"},
    )
    monkeypatch.setattr(SessionOutboxProjection, "same_rows_since", None)


def _declared_as(
    monkeypatch: pytest.MonkeyPatch,
    module: ModuleType,
    projection: type[Projection],
    version: int,
    kinds: dict[ColumnType, ColumnType],
) -> None:
    """``projection`` (declared in ``module``) as an earlier ``version`` declared it: its
    columns of each kind in ``kinds`` as of the kind it maps to."""
    tables = []
    for table in projection.tables:
        columns = tuple((name, kinds.get(kind, kind)) for name, kind in table.columns)
        earlier = dataclasses.replace(table, columns=columns)
        [declared] = [name for name, value in vars(module).items() if value is table]
        monkeypatch.setattr(module, declared, earlier)
        tables.append(earlier)
    monkeypatch.setattr(projection, "tables", tuple(tables))
    monkeypatch.setattr(projection, "version", version)


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


def test_viewer_deltas_of_version_5_upgrade_on_open_and_keep_their_digest_and_bundles(
    new_url: str, tmp_path: Path
) -> None:
    bundle = tmp_path / "run-1.jsonl"
    with pytest.MonkeyPatch.context() as patch:
        _declared_as(patch, viewer_deltas, ViewerDeltasProjection, 5, {"packed": "json"})
        with open_store(new_url) as store:
            record_session(store, "run-1", 2, 64)
            before = store.read_model_digest(ViewerDeltasProjection.name)
            deltas_before = store.viewer_deltas("run-1", after_revision=1)
            store.export_run("run-1", bundle)
        with open_runtime(new_url) as runtime:
            rows = stored_rows(runtime, ViewerDeltasProjection, REVISIONS)
            assert all(type(row["deltas"]) is str for row in rows)

    with open_runtime(new_url) as runtime:
        status = {state.name: state for state in runtime.projection_status()}
        rows = stored_rows(runtime, ViewerDeltasProjection, REVISIONS)
        store = WorkflowStore(runtime)
        after = store.read_model_digest(ViewerDeltasProjection.name)
        deltas_after = store.viewer_deltas("run-1", after_revision=1)

    assert (status["viewer_deltas"].version, status["viewer_deltas"].lag) == (6, 0)
    assert all(type(row["deltas"]) is bytes for row in rows)
    assert [row["deltas"][0] for row in rows].count(1) >= 2
    assert after == before
    assert deltas_after == deltas_before
    assert read_lines(bundle)[-1]["read_models"]["viewer_deltas"]["version"] == 5
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
