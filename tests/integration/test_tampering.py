"""A stored row changed behind the store's back is refused by every read path, and runs no code.

Each case writes a real history through the commands, changes one row of it with raw SQL (as
an attacker with database access, or a broken disk, would), and reopens the store. Whatever
the change, the row is a ``CorruptEventError`` naming its aggregate (and its log position
where the read path reads the log): for aggregate loads, for ``event_log``, for the
projections (which stall with it, and whose queries then say so) and for a rebuild (which
stops with it). No module named by the row is imported, no class it names is instantiated.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import psycopg
import pytest

from runledger.domain.errors import (
    CorruptEventError,
    ProjectionStalledError,
    RebuildFailedError,
)
from runledger.domain.packed_state import unpacked
from runledger.domain.runs import run_aggregate_id
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.integration.conftest import BACKENDS
from tests.support.clock import FakeClock

# Memory has no rows to change behind the store's back. PostgreSQL runs every case too, but
# a database per case makes it slow.
pytestmark = pytest.mark.parametrize(
    "store_url",
    [
        pytest.param(*backend.values, marks=[*backend.marks, pytest.mark.slow], id=backend.id)
        if backend.id == "postgresql"
        else backend
        for backend in BACKENDS
        if backend.id != "memory"
    ],
    indirect=True,
)

SESSION = "session-1"
CLI = (sys.executable, "-m", "runledger.infrastructure.cli")
SENTINEL = "runledger_tamper_sentinel"
SENTINEL_TOPIC = f"{SENTINEL}:Sentinel"
SENTINEL_SOURCE = '''
"""Imported only if stored data chose code: each step leaves a file beside this module."""
import pathlib

_HERE = pathlib.Path(__file__)
_HERE.with_suffix(".imported").write_text("imported")


class Sentinel:
    def __new__(cls, *args, **kwargs):
        _HERE.with_suffix(".instantiated").write_text("instantiated")
        return super().__new__(cls)
'''

Payload = dict[str, Any]


@dataclass(frozen=True)
class Row:
    """One stored event as the table holds it."""

    position: int
    topic: str
    version: int
    state: bytes


@dataclass(frozen=True)
class Tamper:
    """One way a stored ``run.created`` row can be wrong, and what the error must say."""

    name: str
    change: Callable[[Row], Row]
    reason: str


def payload_change(change: Callable[[Payload], object]) -> Callable[[Row], Row]:
    """A tamper that rewrites the row's JSON payload (``change`` returns the new value)."""

    def tampered(row: Row) -> Row:
        return Row(
            row.position,
            row.topic,
            row.version,
            orjson.dumps(change(orjson.loads(unpacked(row.state)))),
        )

    return tampered


def with_field(name: str, value: object) -> Callable[[Row], Row]:
    return payload_change(lambda payload: {**payload, name: value})


def without_field(name: str) -> Callable[[Row], Row]:
    return payload_change(lambda payload: {k: v for k, v in payload.items() if k != name})


def raw(
    *, topic: str | None = None, state: bytes | None = None, version: int | None = None
) -> Callable[[Row], Row]:
    def tampered(row: Row) -> Row:
        return Row(
            row.position,
            row.topic if topic is None else topic,
            row.version if version is None else version,
            row.state if state is None else state,
        )

    return tampered


TAMPERS = [
    Tamper(
        "topic column names a module",
        raw(topic=SENTINEL_TOPIC),
        f"wire name '{SENTINEL_TOPIC}' is not in the runledger event catalogue",
    ),
    Tamper(
        "topic column names another catalogue event",
        raw(topic="follow-up.removed"),
        "version 1 is impossible for a later event",
    ),
    Tamper(
        "payload topic names a module",
        with_field("originator_topic", SENTINEL_TOPIC),
        "field 'originator_topic' must be 'run', the aggregate of this event, not text",
    ),
    Tamper(
        "payload topic names another aggregate",
        with_field("originator_topic", "follow-up"),
        "field 'originator_topic' must be 'run', the aggregate of this event, not text",
    ),
    Tamper("invalid JSON", raw(state=b'{"timestamp": '), "its payload is not valid JSON"),
    Tamper(
        "a JSON array",
        payload_change(lambda payload: list(payload.values())),
        "its payload is an array, not a JSON object",
    ),
    Tamper("a JSON number", raw(state=b"42"), "its payload is a number, not a JSON object"),
    Tamper("missing field", without_field("workflow_name"), "field 'workflow_name' is missing"),
    Tamper(
        "mistyped field",
        with_field("title", 5),
        "field 'title' must be text or null, not a number",
    ),
    Tamper(
        "mistyped integer field",
        with_field("restart_number", "0"),
        "field 'restart_number' must be an integer, not text",
    ),
    Tamper(
        "extra field",
        with_field("__class__", SENTINEL_TOPIC),
        "field '__class__' is not one of its fields",
    ),
    Tamper("missing timestamp", without_field("timestamp"), "field 'timestamp' is missing"),
    Tamper(
        "garbage timestamp",
        with_field("timestamp", "yesterday"),
        "field 'timestamp' must be an ISO-8601 time with a time zone, not text",
    ),
    Tamper(
        "integer timestamp",
        with_field("timestamp", 1767225600),
        "field 'timestamp' must be an ISO-8601 time with a time zone, not a number",
    ),
    Tamper(
        "timestamp without a time zone",
        with_field("timestamp", "2026-01-01T00:00:00"),
        "field 'timestamp' must be an ISO-8601 time with a time zone, not text",
    ),
    Tamper(
        "actor stored as a string",
        with_field("actor", "human"),
        "field 'actor' must be an object with a known actor type and a text or null id, not text",
    ),
    Tamper(
        "actor missing its id",
        with_field("actor", {"type": "human"}),
        "field 'actor' must be an object with a known actor type and a text or null id",
    ),
    Tamper(
        "actor of an unknown type",
        with_field("actor", {"type": SENTINEL_TOPIC, "id": None}),
        "field 'actor' must be an object with a known actor type and a text or null id",
    ),
    Tamper(
        "class version from the future",
        with_field("class_version", 99),
        "class_version 99 is not between 1 and 2",
    ),
    Tamper("version zero", raw(version=0), "its version is not a positive integer"),
]


class RawTable:
    """The store's event table, reached around the store as an attacker would."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.sqlite = url.startswith("sqlite:///")
        self.mark = "?" if self.sqlite else "%s"

    def _execute(self, statement: str, params: tuple[object, ...]) -> list[tuple[Any, ...]]:
        if self.sqlite:
            with closing(sqlite3.connect(self.url.removeprefix("sqlite:///"))) as connection:
                rows = connection.execute(statement, params).fetchall()
                connection.commit()
                return rows
        with psycopg.connect(self.url, autocommit=True) as connection:
            cursor = connection.execute(statement.replace("?", "%s"), params)
            return cursor.fetchall() if cursor.description else []

    def first(self, topic: str) -> Row:
        return self._one(topic, "ASC")

    def last(self, topic: str) -> Row:
        return self._one(topic, "DESC")

    def _one(self, topic: str, order: str) -> Row:
        rows = self._execute(
            "SELECT position, topic, originator_version, state FROM runledger_events "
            f"WHERE topic = ? ORDER BY position {order} LIMIT 1",
            (topic,),
        )
        position, stored_topic, version, state = rows[0]
        return Row(position, stored_topic, version, bytes(state))

    def replace(self, row: Row) -> None:
        self._execute(
            "UPDATE runledger_events SET topic = ?, originator_version = ?, state = ? "
            "WHERE position = ?",
            (row.topic, row.version, row.state, row.position),
        )


def write_history(store: WorkflowStore) -> None:
    """A run bound to a session with one follow-up queued: a few events of three aggregates."""
    store.create_run("run-1", workflow_name="echo", input={"task": "reply"}, title="Echo")
    store.bind_origin_session("run-1", SESSION)
    store.queue_follow_up(
        "run-1",
        request_id="request-1",
        target_session_id=SESSION,
        actor=Actor("human", "ada"),
        source="chat",
        prompt="and then?",
    )


@pytest.fixture
def sentinel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A module on ``sys.path`` that leaves files behind if it is imported or instantiated."""
    folder = tmp_path / "sentinel"
    folder.mkdir()
    (folder / f"{SENTINEL}.py").write_text(SENTINEL_SOURCE)
    monkeypatch.syspath_prepend(str(folder))
    yield folder
    sys.modules.pop(SENTINEL, None)


def assert_no_code_ran(sentinel: Path) -> None:
    assert SENTINEL not in sys.modules
    assert sorted(path.name for path in sentinel.iterdir()) == [f"{SENTINEL}.py"]


@pytest.fixture(params=TAMPERS, ids=[tamper.name for tamper in TAMPERS])
def tamper(request: pytest.FixtureRequest) -> Tamper:
    chosen: Tamper = request.param
    return chosen


@pytest.fixture
def tampered(store_url: str, clock: FakeClock, tamper: Tamper, sentinel: Path) -> Row:
    """The store at ``store_url`` holds a history whose ``run.created`` row was tampered
    before any projection read it (a rebuild reads it again in any case)."""
    with open_runtime(store_url, clock=clock, embedded_projections=False) as runtime:
        write_history(WorkflowStore(runtime))
    table = RawTable(store_url)
    changed = tamper.change(table.first("run.created"))
    table.replace(changed)
    return changed


@pytest.fixture
def reopened(store_url: str, clock: FakeClock, tampered: Row) -> Iterator[StoreRuntime]:
    with open_runtime(store_url, clock=clock) as runtime:
        yield runtime


def test_loading_the_tampered_run_is_a_corrupt_event_error_and_a_command_writes_nothing(
    reopened: StoreRuntime, tampered: Row, tamper: Tamper, sentinel: Path
) -> None:
    store = WorkflowStore(reopened)
    with pytest.raises(CorruptEventError) as raised:
        store.get_run("run-1")
    assert raised.value.aggregate_id == run_aggregate_id("run-1")
    assert raised.value.version == tampered.version
    assert tamper.reason in raised.value.reason
    before = reopened.storage.max_position()
    with pytest.raises(CorruptEventError):
        store.pause_run("run-1")
    assert reopened.storage.max_position() == before
    assert_no_code_ran(sentinel)


def test_reading_the_log_stops_at_the_tampered_event(
    reopened: StoreRuntime, tampered: Row, tamper: Tamper, sentinel: Path
) -> None:
    store = WorkflowStore(reopened)
    for run_id in (None, "run-1"):
        with pytest.raises(CorruptEventError) as raised:
            store.event_log(run_id=run_id)
        assert raised.value.position == tampered.position
        assert raised.value.aggregate_id == run_aggregate_id("run-1")
        assert tamper.reason in raised.value.reason
        assert f"at position {tampered.position}" in str(raised.value)
    # It alone is refused: a reader that pages past it on purpose reads what follows.
    assert [event.position for event in store.event_log(after=tampered.position)]
    assert_no_code_ran(sentinel)


def test_every_projection_stalls_at_the_tampered_event_and_its_queries_say_so(
    reopened: StoreRuntime, tampered: Row, sentinel: Path
) -> None:
    statuses = reopened.projection_status()
    # Every read model stalls: each decodes every event, whether it consumes it or not.
    assert sorted(status.name for status in statuses) == sorted(reopened.projection_names())
    for status in statuses:
        assert status.position < tampered.position
        assert status.last_error is not None
        assert f"at position {tampered.position}" in status.last_error
        assert "CorruptEventError" in status.last_error
    store = WorkflowStore(reopened)
    queries: list[Callable[[], object]] = [
        lambda: store.follow_up_queue("run-1"),
        lambda: store.terminal_data("run-1"),
        lambda: store.session_outbox(SESSION),
        lambda: store.viewer_deltas("run-1", after_revision=0),
        lambda: store.settings_scopes("run-1"),
        lambda: store.list_runs(),
    ]
    for query in queries:
        with pytest.raises(ProjectionStalledError, match="is corrupt"):
            query()
    assert_no_code_ran(sentinel)


def test_a_rebuild_stops_with_the_tampered_event(
    reopened: StoreRuntime, tampered: Row, sentinel: Path
) -> None:
    with pytest.raises(CorruptEventError) as raised:
        reopened.rebuild_projections()
    assert raised.value.position == tampered.position
    for status in reopened.projection_status():
        assert status.position < tampered.position
        assert status.last_error is not None
    assert_no_code_ran(sentinel)


@pytest.mark.parametrize("tamper", TAMPERS[:1], ids=[TAMPERS[0].name], indirect=True)
def test_a_parallel_rebuild_stops_with_the_tampered_event(
    reopened: StoreRuntime, tampered: Row, sentinel: Path
) -> None:
    with pytest.raises(RebuildFailedError, match=f"at position {tampered.position}"):
        reopened.rebuild_projections(processes=2)
    assert all(status.last_error for status in reopened.projection_status())
    assert_no_code_ran(sentinel)


@pytest.mark.parametrize("tamper", TAMPERS[2:3], ids=[TAMPERS[2].name], indirect=True)
def test_the_cli_rebuild_reports_the_tampered_event_and_exits_non_zero(
    store_url: str, tampered: Row, sentinel: Path, tmp_path: Path
) -> None:
    completed = subprocess.run(
        [*CLI, "projections", "rebuild", "--all", "--url", store_url],
        cwd=tmp_path,
        # The sentinel is importable there too: a decode that resolved it would leave a file.
        env={**os.environ, "PYTHONPATH": str(sentinel)},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert completed.returncode == 1, completed.stderr
    assert "is corrupt" in completed.stderr
    assert f"at position {tampered.position}" in completed.stderr
    assert_no_code_ran(sentinel)
