"""View columns kept compact (``compact``: the outbox's ids and times, a viewer revision's
time) store the bytes the text stands for and read back the text, on memory, SQLite and
PostgreSQL: looked up by key, compared by a blue/green rebuild, named in its differences,
and refused when damaged, never read as something else."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from datetime import UTC, datetime
from typing import Any

import orjson
import psycopg
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from psycopg.sql import SQL, Identifier

from runledger.domain.records import ViewerDeltas
from runledger.infrastructure import open_store
from runledger.infrastructure.audit.reprojection import reproject
from runledger.infrastructure.audit.stored_events import log_entry, run_notifications
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.compact_text import (
    HEX,
    PREFIXES,
    TIME,
    CompactTextError,
    compact,
    expanded,
)
from runledger.infrastructure.views.postgres import COMPACT_TEXT_FUNCTION
from runledger.infrastructure.views.sqlite import SQLITE
from runledger.infrastructure.views.store import PACK_FROM, decode_row, encode_key, encode_row
from runledger.projections.session_outbox import (
    FOLLOW_UPS,
    MESSAGES,
    SessionOutboxProjection,
)
from runledger.projections.viewer_deltas import REVISIONS, ViewerDeltasProjection
from tests.support import scenario
from tests.support.sessions import session_binding, session_events

SESSION = "pi-compact"


def queue(store: WorkflowStore, count: int) -> None:
    """A running run on SESSION with ``count`` follow-ups queued on it."""
    scenario.running_run(store, session_id=SESSION)
    for number in range(count):
        scenario.queue(store, f"request-{number}", target_session_id=SESSION)


def raw_rows(runtime: StoreRuntime, name: str, table_name: str) -> list[dict[str, Any]]:
    slot = runtime.views.registry(name).active
    assert slot is not None
    rows = runtime.views.raw_rows(table_name, slot)
    assert rows is not None
    return rows


def test_outbox_ids_and_times_are_stored_compact_and_read_back_as_text(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    queue(store, 3)

    outbox = store.session_outbox(SESSION)
    messages = raw_rows(runtime, SessionOutboxProjection.name, MESSAGES.name)
    follow_ups = raw_rows(runtime, SessionOutboxProjection.name, FOLLOW_UPS.name)

    assert len(outbox) == len(messages) == len(follow_ups) == 3
    for row in messages:
        # ``workflow-message-`` and 64 hex digits (81 characters) as 34 bytes; a time as 9.
        assert (row["workflow_message_id"][0], len(row["workflow_message_id"])) == (HEX, 34)
        assert (row["created_at"][0], len(row["created_at"])) == (TIME, 9)
        assert len(row["content_digest"]) == 34
    by_id = {message.workflow_message_id: message for message in outbox}
    assert sorted(by_id) == sorted(expanded(row["workflow_message_id"]) for row in messages)
    for row in messages:
        message = by_id[expanded(row["workflow_message_id"])]
        assert message.created_at.isoformat() == expanded(row["created_at"])
        assert message.source_id == expanded(row["source_id"])


def test_a_revision_time_is_stored_compact_and_the_deltas_keep_it(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    scenario.create(store)
    store.record_session_binding("run-1", session_binding("run-1", SESSION))
    for batch in range(3):
        store.append_session_events("run-1", session_events(batch * 4 + 1, 4))

    rows = raw_rows(runtime, ViewerDeltasProjection.name, REVISIONS.name)
    deltas = store.viewer_deltas("run-1", after_revision=1)

    assert isinstance(deltas, ViewerDeltas)
    assert rows
    assert all(len(row["recorded_at"]) == 9 for row in rows)
    later = {expanded(row["recorded_at"]) for row in rows if row["revision"] > 1}
    assert later == {delta.recorded_at.isoformat() for delta in deltas.deltas}


def test_a_compact_column_is_never_an_order(runtime: StoreRuntime) -> None:
    reader = runtime.views.reader()

    with pytest.raises(ValueError, match="compact"):
        reader.scan(MESSAGES, order_by="created_at")


def test_a_query_by_a_compact_column_finds_the_row_and_a_wrong_type_finds_none(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    queue(store, 2)
    reader = runtime.views.reader()
    [first, second] = store.session_outbox(SESSION)

    found = reader.scan(MESSAGES, equals={"source_id": second.source_id})
    within = reader.scan(FOLLOW_UPS, within={"workflow_message_id": [first.workflow_message_id, 7]})

    assert [row["workflow_message_id"] for row in found] == [second.workflow_message_id]
    assert [row["workflow_message_id"] for row in within] == [first.workflow_message_id]
    assert reader.get(MESSAGES, (first.workflow_message_id,)) is not None
    assert reader.get(MESSAGES, (["not", "text"],)) is None
    assert reader.scan(MESSAGES, equals={"source_id": 7}) == []


def test_a_scratch_reprojection_keeps_compact_columns_as_text_and_answers_as_the_live_one(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    """Re-projected in memory for its digests and checks only (an export, a verify-bundle, a
    restore's checks, ``as_of``), an id or a time is not compacted: a query by it, a key and
    the digest answer as the live store does."""
    queue(store, 3)
    [first, second, _] = store.session_outbox(SESSION)
    entries = [log_entry(n) for n in run_notifications(runtime.storage, ["run-1"])]

    fresh = reproject(entries, [SessionOutboxProjection()])
    slot = fresh.views.registry(SessionOutboxProjection.name).active
    assert slot is not None
    scratch = fresh.views.raw_rows(MESSAGES.name, slot)
    reader, live = fresh.reader(), runtime.views.reader()

    assert scratch is not None
    assert sorted(row["workflow_message_id"] for row in scratch) == sorted(
        message.workflow_message_id for message in store.session_outbox(SESSION)
    )
    assert all(type(row["created_at"]) is str for row in scratch)
    for view in (reader, live):
        found = view.scan(MESSAGES, equals={"source_id": second.source_id})
        within = view.scan(
            FOLLOW_UPS, within={"workflow_message_id": [first.workflow_message_id, 7]}
        )
        assert [row["workflow_message_id"] for row in found] == [second.workflow_message_id]
        assert [row["workflow_message_id"] for row in within] == [first.workflow_message_id]
        assert view.count(MESSAGES, equals={"source_id": first.source_id}) == 1
        assert view.get(MESSAGES, (first.workflow_message_id,)) == live.get(
            MESSAGES, (first.workflow_message_id,)
        )
    assert reader.scan(MESSAGES) == live.scan(MESSAGES)
    assert fresh.digests()[SessionOutboxProjection.name]["digest"] == store.read_model_digest(
        SessionOutboxProjection.name
    )


def test_a_plain_row_keeps_its_text_and_its_json_and_reads_back_as_the_stored_one() -> None:
    message_id, time = "workflow-message-" + "ab" * 32, "2026-01-02T03:04:05.000006+00:00"
    row = {name: None for name in MESSAGES.column_names} | {
        "workflow_message_id": message_id,
        "created_at": time,
        "content": "x" * PACK_FROM,
    }

    plain = encode_row(MESSAGES, row, plain=True)
    stored = encode_row(MESSAGES, row)

    assert (plain["workflow_message_id"], plain["created_at"]) == (message_id, time)
    assert plain["content"] == orjson.dumps("x" * PACK_FROM)
    assert stored["created_at"] == compact(time)
    assert stored["content"] != plain["content"]
    assert decode_row(MESSAGES, dict(plain)) == decode_row(MESSAGES, dict(stored)) == row
    assert encode_key(MESSAGES, (message_id,), plain=True) == (message_id,)
    assert encode_key(MESSAGES, (message_id,)) == (compact(message_id),)
    with pytest.raises(ValueError, match="holds text, not int"):
        encode_row(MESSAGES, row | {"source_id": 7}, plain=True)


def _set_live(runtime: StoreRuntime, table_name: str, column: str, value: bytes) -> None:
    """Store ``value`` in ``column`` of every live row of the outbox table, as stored."""
    views: Any = runtime.views
    slot = views.registry(SessionOutboxProjection.name).active
    physical = views.physical_name(table_name, slot)
    if hasattr(views, "_tables"):  # memory: the slot's rows as stored, by key
        for row in views._tables[physical].values():
            row[column] = value
        return
    with views._transaction() as cursor:
        cursor.execute(
            views.dialect.sql(
                f"UPDATE {{}} SET {column} = {{mark}}", views.dialect.table(physical)
            ),
            (value,),
        )


def test_a_rebuild_finds_a_changed_compact_value_and_names_its_key_as_text(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    queue(store, 2)
    ids = sorted(message.workflow_message_id for message in store.session_outbox(SESSION))

    [same] = runtime.rebuild_blue_green([SessionOutboxProjection.name])
    _set_live(runtime, MESSAGES.name, "updated_at", bytes((TIME,)) + (0).to_bytes(8, "big"))
    [changed] = runtime.rebuild_blue_green([SessionOutboxProjection.name])

    assert (same.compared, same.equal, same.switched) == ("rows", True, True)
    assert (changed.compared, changed.equal, changed.switched) == ("rows", False, False)
    assert {diff.table: diff.changed for diff in changed.tables}[MESSAGES.name] == 2
    assert sorted(diff.key[0] for diff in changed.first_differences) == ids
    assert all(
        diff.live is not None and diff.live["updated_at"] == "1970-01-01T00:00:00+00:00"
        for diff in changed.first_differences
    )


@pytest.mark.parametrize("damage", [b"", b"\x07", b"\x01\x00", b"\x00\xff"])
def test_a_damaged_compact_value_is_refused_not_read_as_some_text(
    store: WorkflowStore, runtime: StoreRuntime, damage: bytes
) -> None:
    queue(store, 1)
    _set_live(runtime, MESSAGES.name, "source_id", damage)

    with pytest.raises(CompactTextError):
        store.session_outbox(SESSION)


def _plain_rows(url: str, statement: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Rows read as an operator's ad-hoc SQL reads them: a connection of no code of ours."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as connection:
            return connection.execute(statement.replace("%s", "?"), params).fetchall()
    with psycopg.connect(url) as connection:
        return connection.execute(statement, params).fetchall()


def test_the_logical_views_show_compact_columns_as_their_text(durable_url: str) -> None:
    with open_store(durable_url) as store:
        queue(store, 2)
        outbox = store.session_outbox(SESSION)
    wanted = outbox[1]

    rows = _plain_rows(
        durable_url,
        "SELECT workflow_message_id, source_id, created_at, content_digest "
        "FROM rl_so_messages WHERE workflow_message_id = %s",
        (wanted.workflow_message_id,),
    )

    assert rows == [
        (
            wanted.workflow_message_id,
            wanted.source_id,
            wanted.created_at.isoformat(),
            wanted.content_digest,
        )
    ]


@contextmanager
def _view_text(url: str) -> Iterator[Callable[[bytes], Any]]:
    """What a logical view shows for one stored compact value, on the URL's backend."""
    if url.startswith("sqlite:///"):
        with closing(sqlite3.connect(":memory:")) as lite:
            lite.execute("CREATE TABLE t (v BLOB)")
            lite.execute(f"CREATE VIEW w AS SELECT {SQLITE.compact_text('v')} AS v FROM t")

            def sqlite_view(stored: bytes) -> Any:
                lite.execute("DELETE FROM t")
                lite.execute("INSERT INTO t VALUES (?)", (stored,))
                return lite.execute("SELECT v FROM w").fetchone()[0]

            yield sqlite_view
        return
    with open_store(url):
        pass  # makes the function in the store's schema
    function = SQL("SELECT {}(%s)").format(Identifier("public", COMPACT_TEXT_FUNCTION))
    with psycopg.connect(url, autocommit=True) as connection:

        def postgres_view(stored: bytes) -> Any:
            row = connection.execute(function, (stored,)).fetchone()
            return None if row is None else row[0]

        yield postgres_view


TEXTS = st.one_of(
    st.datetimes(timezones=st.just(UTC)).map(datetime.isoformat),
    st.builds(
        lambda prefix, digest: prefix + digest.hex(),
        st.sampled_from(PREFIXES),
        st.binary(min_size=1, max_size=40),
    ),
    # Text PostgreSQL can hold: no NUL, no lone surrogate.
    st.text(st.characters(codec="utf-8", exclude_characters="\x00")),
)


def test_a_view_shows_any_compact_value_as_the_store_reads_it(durable_url: str) -> None:
    with _view_text(durable_url) as shown:

        @settings(max_examples=150, deadline=None)
        @given(TEXTS)
        def same_text(text: str) -> None:
            assert shown(compact(text)) == text

        same_text()


@pytest.mark.parametrize("damage", [b"\x07", b"\x01\x00", b"\x02\x09\xab"])
def test_a_view_never_shows_damaged_bytes_as_some_text(durable_url: str, damage: bytes) -> None:
    with _view_text(durable_url) as shown:
        if durable_url.startswith("sqlite"):
            # SQLite's SQL cannot raise in a view: it shows the bytes as they are.
            assert shown(damage) == damage
        else:
            with pytest.raises(psycopg.errors.DataCorrupted):
                shown(damage)
