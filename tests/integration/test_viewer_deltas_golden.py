"""Golden answers of ``viewer_deltas``: the same bytes on every backend, whatever the storage.

A deterministic history (a generated slice of the bench history, then commands for what it
lacks: 300 follow-ups with removals, sends and a cancelling end, settings changes and a
hand-over to a continuation, 300 progress updates, a recorded session, a restart) is built on
each backend, and ``viewer_deltas`` is asked for many cursors of every run, snapshot_required
ones included. Each answer's JSON must hash to the digest recorded in
``golden/viewer_deltas.json`` (a few answers are kept in full, to show what changed when a
digest does not match). The file was written by the code that stored every revision's whole
window, so a more compact storage must expand to exactly the same answers.

To record the file again (only when the answers are meant to change):
``RUNLEDGER_WRITE_GOLDEN=1 pytest tests/integration/test_viewer_deltas_golden.py -k memory``.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import pytest

from runledger.domain.ids import follow_up_message_id
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.integration.conftest import BACKENDS
from tests.support.clock import FakeClock
from tests.support.postgres import PostgresServer
from tests.support.scenario import (
    HUMAN,
    IC,
    SESSION,
    create,
    deliver,
    queued_id,
    restart,
    running_run,
)
from tests.support.sessions import session_binding, session_capture, session_events

GOLDEN: Final = Path(__file__).parent / "golden" / "viewer_deltas.json"
POLICY: Final = {"rules": [{"path": "", "permissions": {"human": ["read", "replace"]}}]}
FULL_ANSWERS: Final = 8
"""How many small answers the golden file keeps in full."""


def window_run(store: WorkflowStore) -> list[str]:
    """300 follow-ups (past the 256-item window), removals inside and before the window, a
    sent message, settings beside them, then a failed end cancelling the rest (past the
    256-revision retention)."""
    run_id = "golden-window"
    running_run(store, run_id)
    scope = store.ensure_settings_scope(run_id, settings={"mode": "a"}, policy=POLICY)
    ids = [queued_id(store, f"window-{number}", run_id=run_id) for number in range(300)]
    store.remove_follow_up(run_id, ids[3], actor=HUMAN, source=IC)
    store.remove_follow_up(run_id, ids[290], actor=HUMAN, source=IC)
    deliver(store, follow_up_message_id(ids[295]), "entry-window-295")
    store.change_settings(
        run_id,
        scope.scope_id,
        request_id="window-change",
        actor=HUMAN,
        source=IC,
        patch=[{"op": "replace", "path": "/mode", "value": "b"}],
    )
    store.finish_run(run_id, status="failed", error="window failed")
    return [run_id]


def updates_run(store: WorkflowStore) -> list[str]:
    """300 progress updates over 270 keys (some replaced), pauses, instructions, waiting."""
    run_id = "golden-updates"
    running_run(store, run_id)
    for number in range(300):
        store.publish_update(
            run_id,
            attempt_id=f"attempt-{number // 100}",
            update_type="progress" if number % 3 else "log",
            key=f"key-{number % 270}",
            data={"step": number, "note": "x" * (number % 7)},
        )
        if number % 97 == 0:
            store.pause_run(run_id, status_detail=f"paused at {number}")
            store.resume_run(run_id)
    store.set_presentation_instructions(run_id, "Show the updates.")
    store.record_progress(run_id, status="waiting", waiting_on="review")
    store.finish_run(run_id, status="completed", final_output={"updates": 300})
    return [run_id]


def settings_run(store: WorkflowStore) -> list[str]:
    """Two scopes changed, handed over to a continuation that changes and queues too."""
    parent, child = "golden-settings", "golden-settings-child"
    running_run(store, parent)
    root = store.ensure_settings_scope(parent, settings={"mode": "a"}, policy=POLICY)
    store.ensure_settings_scope(parent, mount_path="tools", settings={"on": 1}, policy=POLICY)
    queued_id(store, "settings-1", run_id=parent)
    for number in range(3):
        store.change_settings(
            parent,
            root.scope_id,
            request_id=f"parent-change-{number}",
            actor=HUMAN,
            source=IC,
            patch=[{"op": "replace", "path": "/mode", "value": f"p{number}"}],
        )
    store.record_progress(parent, status="waiting", waiting_on="continue")
    create(store, child, parent_run_id=parent)
    store.bind_origin_session(child, SESSION)
    store.record_progress(child, status="running", current_node="resume")
    store.change_settings(
        child,
        root.scope_id,
        request_id="child-change",
        actor=HUMAN,
        source=IC,
        patch=[{"op": "replace", "path": "/mode", "value": "child"}],
    )
    queued_id(store, "child-1", run_id=child)
    store.finish_run(child, status="completed", final_output={"done": True})
    return [parent, child]


def session_run(store: WorkflowStore) -> list[str]:
    """A recorded session: 260 entries (past the window), then 300 events in batches that
    reach page two, captures, and a second attempt's segment."""
    run_id = "golden-session"
    store.create_run(run_id, workflow_name="review", input={"pr": 1})
    store.record_session_binding(run_id, session_binding(run_id, "pi-1"))
    store.append_session_entry(run_id, {"id": "entry-first", "role": "user"})
    store.update_session_capture(run_id, session_capture("recording", 1, 0))
    for number in range(259):
        store.append_session_entry(run_id, {"role": "assistant", "n": number})
    for first in (1, 101, 201):
        store.append_session_events(run_id, session_events(first, 100))
    store.update_session_capture(run_id, session_capture("complete", 260, 300))
    store.record_session_binding(run_id, session_binding(run_id, "pi-2"), attempt_id="attempt-2")
    store.append_session_events(run_id, session_events(1, 10), attempt_id="attempt-2")
    return [run_id]


def restarted_run(store: WorkflowStore) -> list[str]:
    """A failed run presented and restarted; the restart child runs and completes."""
    run_id = "golden-flaky"
    running_run(store, run_id)
    queued_id(store, "flaky-1", run_id=run_id)
    store.finish_run(run_id, status="failed", error="flaky")
    child = restart(store, run_id).run_id
    store.record_progress(child, status="running", current_node="again")
    store.finish_run(child, status="completed", final_output={"ok": True})
    return [run_id, child]


def generated_run_ids(count: int) -> list[str]:
    return [f"golden-run-{number}" for number in range(1, count + 1)]


@dataclass(frozen=True)
class Answers:
    """The chosen answers as JSON text, keyed ``run_id@cursor``: as the viewer followed the
    log, and after a rebuild of the projection from it."""

    live: dict[str, str]
    rebuilt: dict[str, str]


def built_answers(url: str) -> Answers:
    """The golden history written into the store at ``url``, and its answers."""
    generator = HistoryGenerator(seed=12, prefix="golden")
    with open_runtime(url, clock=FakeClock()) as runtime:
        for batch in generator.batches(2500, follow_ups_per_run=40, batch_events=1000):
            runtime.storage.events.insert_events(batch)
        runtime.catch_up()
        store = WorkflowStore(runtime)
        run_ids = generated_run_ids(generator.runs)
        for scenario in (window_run, updates_run, settings_run, session_run, restarted_run):
            run_ids.extend(scenario(store))
        live = answers(store, run_ids)
        store.rebuild_projection("viewer_deltas")
        return Answers(live, answers(store, run_ids))


@pytest.fixture(scope="module", params=BACKENDS)
def golden_answers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Answers]:
    """Every chosen answer of the golden history on the parametrised backend."""
    if request.param == "memory":
        yield built_answers("memory://")
    elif request.param == "sqlite":
        yield built_answers(f"sqlite:///{tmp_path_factory.mktemp('golden') / 'runledger.db'}")
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        name = server.new_database_name()
        try:
            yield built_answers(server.create_database(name))
        finally:
            server.drop_database(name)


def cursors(current: int, retained_from: int, *, many: bool) -> list[int]:
    """Cursors around every edge: none yet, the start, retention's edge, the head."""
    chosen = {0, 1, 2, current // 2, current - 1, current, current + 1}
    if many:
        chosen |= {retained_from - 2, retained_from - 1, retained_from, current - 3, current - 60}
        chosen |= set(range(retained_from - 1, current, 37))
    return sorted(cursor for cursor in chosen if cursor >= 0)


def answers(store: WorkflowStore, run_ids: list[str]) -> dict[str, str]:
    """Every chosen answer as its JSON text, keyed ``run_id@cursor``."""
    found: dict[str, str] = {}
    for run_id in run_ids:
        head = store.viewer_deltas(run_id, after_revision=0)
        many = not run_id.startswith("golden-run-") or run_id == "golden-run-1"
        for cursor in cursors(head.current_revision, head.retained_from_revision, many=many):
            answer = store.viewer_deltas(run_id, after_revision=cursor)
            found[f"{run_id}@{cursor}"] = answer.model_dump_json()
    return found


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def golden_document(found: dict[str, str]) -> dict[str, Any]:
    """Digests of every answer, and the first few small ones of each kind in full."""
    small = sorted(
        (key for key, text in found.items() if len(text) < 6000),
        key=lambda key: (-len(found[key]), key),
    )
    full = {key: json.loads(found[key]) for key in small[:FULL_ANSWERS]}
    snapshots = [key for key, text in found.items() if '"snapshot_required"' in text]
    full |= {key: json.loads(found[key]) for key in snapshots[:2]}
    return {"digests": {key: digest(text) for key, text in found.items()}, "full": full}


@pytest.mark.slow
def test_every_viewer_deltas_answer_is_the_golden_one(golden_answers: Answers) -> None:
    found = golden_answers.live
    if os.environ.get("RUNLEDGER_WRITE_GOLDEN") == "1":
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(json.dumps(golden_document(found), indent=1, sort_keys=True) + "\n")
    golden = json.loads(GOLDEN.read_text())

    for key, expected in golden["full"].items():
        assert json.loads(found[key]) == expected, key
    differing = [key for key, text in found.items() if golden["digests"].get(key) != digest(text)]
    assert set(found) == set(golden["digests"])
    assert not differing, f"{len(differing)} answers differ, first {differing[:5]}"


@pytest.mark.slow
def test_the_golden_history_reaches_every_kind_of_answer(golden_answers: Answers) -> None:
    found = {key: json.loads(text) for key, text in golden_answers.live.items()}

    kinds = {answer["kind"] for answer in found.values()}
    targets = {
        (delta["target_type"], delta["target_key"])
        for answer in found.values()
        if answer["kind"] == "deltas"
        for delta in answer["deltas"]
    }
    window, updates = found["golden-window@0"], found["golden-updates@0"]
    assert kinds == {"deltas", "snapshot_required"}
    assert targets >= {
        ("graph", ""),
        ("timeline", "trace:tail"),
        ("inspector", "settings"),
        ("inspector", "follow-ups"),
        ("conversation", "entries:tail"),
        ("conversation", "capture"),
        ("timeline", "session:tail"),
        ("timeline", "session:reload"),
    }
    assert window["retained_from_revision"] > 1, "the window run must outlive retention"
    assert updates["retained_from_revision"] > 1, "the updates run must outlive retention"


@pytest.mark.slow
def test_a_rebuild_from_the_log_gives_the_same_answers(golden_answers: Answers) -> None:
    differing = [
        key for key, text in golden_answers.live.items() if golden_answers.rebuilt.get(key) != text
    ]

    assert set(golden_answers.rebuilt) == set(golden_answers.live)
    assert not differing, f"{len(differing)} answers differ after a rebuild, first {differing[:5]}"
