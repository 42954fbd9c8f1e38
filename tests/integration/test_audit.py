"""audit_run and verify_run on the demo story's failed run, on every backend."""

from __future__ import annotations

import sqlite3

import orjson
import pytest

from runledger.domain.errors import (
    CorruptEventError,
    InvalidAuditArgumentError,
    InvalidRunIdError,
    RunNotFoundError,
)
from runledger.domain.packed_state import unpacked
from runledger.infrastructure import open_store
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from runledger.projections import follow_up_queue, runs, session_outbox, terminal_data
from tests.support.audit import overwrite_rows, play_demo, projection_of
from tests.support.clock import FakeClock
from tests.support.scenario import notification_content


@pytest.fixture
def demo(store: WorkflowStore):
    return play_demo(store)


def stored_row(runtime: StoreRuntime, table, key) -> dict:
    row = runtime.views.reader().get(table, key)
    assert row is not None
    return row


def selected_positions(store: WorkflowStore, run_id: str) -> list[int]:
    return [event.position for event in store.event_log(run_id=run_id, limit=10_000)]


# -- the timeline ---------------------------------------------------------------------------


def test_a_runs_timeline_is_its_event_log_selection_in_log_order(store, demo) -> None:
    trail = store.audit_run(demo.logged_run)

    assert trail.runs == [demo.logged_run]
    assert [entry.position for entry in trail.entries] == selected_positions(store, demo.logged_run)
    assert {entry.run_id for entry in trail.entries} == {demo.logged_run}


def test_each_timeline_entry_says_what_its_event_changed(store, demo) -> None:
    trail = store.audit_run(demo.logged_run)
    finished = [entry for entry in trail.entries if entry.wire_name == "run.finished"]

    assert len(finished) == 1
    assert finished[0].summary == "finished failed, error 3 of 120 tests failed (test_refunds.py)"
    assert finished[0].actor.type == "host"
    assert all(entry.summary for entry in trail.entries)


def test_a_timeline_with_lineage_adds_the_ancestor_and_the_restart(store, demo) -> None:
    trail = store.audit_run(demo.logged_run, lineage=True)
    review, restart = demo.ids.review_run, demo.restart_run

    assert trail.runs == [review, demo.logged_run, restart]
    expected = sorted(
        position
        for run_id in (review, demo.logged_run, restart)
        for position in selected_positions(store, run_id)
    )
    assert [entry.position for entry in trail.entries] == expected
    assert [entry.run_id for entry in trail.entries if entry.wire_name == "run.created"] == [
        review,
        demo.logged_run,
        restart,
    ]


def test_the_lineage_of_the_root_run_reaches_every_descendant(store, demo) -> None:
    trail = store.audit_run(demo.ids.review_run, lineage=True)

    assert trail.runs == [demo.ids.review_run, demo.logged_run, demo.restart_run]


def test_a_timeline_as_of_a_position_stops_there(store, demo) -> None:
    whole = store.audit_run(demo.logged_run, lineage=True)
    cut = whole.entries[len(whole.entries) // 2].position

    trail = store.audit_run(demo.logged_run, lineage=True, as_of=cut)

    assert trail.as_of == cut
    assert trail.entries == [entry for entry in whole.entries if entry.position <= cut]


def test_auditing_an_unknown_run_is_the_run_not_found_error(store, demo) -> None:
    with pytest.raises(RunNotFoundError, match="Workflow run not found: no-such-run"):
        store.audit_run("no-such-run")
    with pytest.raises(RunNotFoundError):
        store.verify_run("no-such-run")


@pytest.mark.parametrize(
    ("arguments", "error"),
    [
        ({"run_id": "bad id"}, InvalidRunIdError),
        ({"run_id": "r", "lineage": "yes"}, InvalidAuditArgumentError),
        ({"run_id": "r", "as_of": -1}, InvalidAuditArgumentError),
        ({"run_id": "r", "as_of": True}, InvalidAuditArgumentError),
    ],
)
def test_bad_audit_arguments_are_refused(store, arguments, error) -> None:
    with pytest.raises(error):
        store.audit_run(**arguments)


# -- verification ---------------------------------------------------------------------------


@pytest.mark.parametrize("which", ["review", "failed", "restart"])
def test_every_run_of_the_demo_verifies(store, demo, which) -> None:
    run_id = {"review": demo.ids.review_run, "failed": demo.logged_run, "restart": demo.restart_run}
    verdict = store.verify_run(run_id[which])

    assert verdict.ok, verdict.difference
    assert verdict.runs == [demo.ids.review_run, demo.logged_run, demo.restart_run]
    assert verdict.events == len(store.audit_run(demo.logged_run, lineage=True).entries)
    assert verdict.aggregates == len(
        {entry.aggregate_id for entry in store.audit_run(demo.logged_run, lineage=True).entries}
    )
    assert verdict.models == store.projection_names()


def test_verify_names_a_tampered_stored_row(
    runtime: StoreRuntime, store: WorkflowStore, demo
) -> None:
    projection = projection_of(runtime, "follow_up_queue")
    queue = store.follow_up_queue(demo.logged_run)
    assert queue is not None
    follow_up = queue.follow_ups[0]
    key = (follow_up.follow_up_id,)
    row = stored_row(runtime, follow_up_queue.FOLLOW_UPS, key)
    overwrite_rows(
        runtime, projection, follow_up_queue.FOLLOW_UPS, {key: {**row, "prompt": "tampered"}}
    )

    verdict = store.verify_run(demo.logged_run)

    assert not verdict.ok
    difference = verdict.difference
    assert difference is not None
    assert (difference.model, difference.table, difference.key) == (
        "follow_up_queue",
        "rl_fuq_follow_ups",
        [follow_up.follow_up_id],
    )
    assert isinstance(difference.expected, dict)
    assert isinstance(difference.stored, dict)
    assert difference.expected["prompt"] == follow_up.prompt
    assert difference.stored["prompt"] == "tampered"


def test_verify_names_a_deleted_stored_row(runtime: StoreRuntime, store: WorkflowStore, demo):
    overwrite_rows(
        runtime,
        projection_of(runtime, "terminal_data"),
        terminal_data.RUNS,
        {(demo.restart_run,): None},
    )

    difference = store.verify_run(demo.logged_run).difference

    assert difference is not None
    assert (difference.model, difference.key, difference.stored) == (
        "terminal_data",
        [demo.restart_run],
        None,
    )
    assert difference.expected["status"] == "completed"


def test_verify_names_a_stored_row_no_event_made(
    runtime: StoreRuntime, store: WorkflowStore, demo
) -> None:
    row = stored_row(runtime, runs.RUNS, (demo.restart_run,))
    forged = {**row, "run_id": "forged-run", "parent_run_id": demo.logged_run}
    overwrite_rows(runtime, projection_of(runtime, "runs"), runs.RUNS, {("forged-run",): forged})

    difference = store.verify_run(demo.logged_run).difference

    assert difference is not None
    assert (difference.model, difference.key, difference.expected) == (
        "runs",
        ["forged-run"],
        None,
    )


def test_verify_names_messages_whose_session_order_was_swapped(
    runtime: StoreRuntime, store: WorkflowStore, demo
) -> None:
    outbox = store.session_outbox(demo.ids.session)
    first, second = outbox[0], outbox[1]
    table = session_outbox.MESSAGES
    one = stored_row(runtime, table, (first.workflow_message_id,))
    two = stored_row(runtime, table, (second.workflow_message_id,))
    overwrite_rows(
        runtime,
        projection_of(runtime, "session_outbox"),
        table,
        {
            (first.workflow_message_id,): {**one, "session_order": two["session_order"]},
            (second.workflow_message_id,): {**two, "session_order": one["session_order"]},
        },
    )

    difference = store.verify_run(demo.logged_run).difference

    assert difference is not None
    assert (difference.model, difference.table, difference.key) == (
        "session_outbox",
        "rl_so_messages",
        [demo.ids.session],
    )


def test_verify_compares_session_order_as_an_order_not_as_numbers(store: WorkflowStore):
    # A message of another tree in the same session comes first, so every live number of
    # the demo's messages is one higher than re-projecting the demo's tree alone gives.
    store.create_run("neighbour", workflow_name="echo", input={})
    store.bind_origin_session("neighbour", "pi-audit")
    store.create_workflow_message(
        "neighbour",
        kind="notification",
        source_id="note-1",
        idempotency_key="key-1",
        content=notification_content("note-1", "key-1", run_id="neighbour"),
    )
    demo = play_demo(store)
    assert demo.ids.session == "pi-audit"
    assert store.session_outbox("pi-audit")[0].run_id == "neighbour"

    assert store.verify_run(demo.logged_run).ok
    assert store.verify_run("neighbour").ok


def test_verify_stops_at_a_stored_event_that_does_not_decode(tmp_path) -> None:
    path = tmp_path / "store.db"
    with open_store(f"sqlite:///{path}", clock=FakeClock()) as store:
        demo = play_demo(store)
    with sqlite3.connect(path) as connection:
        (position, state) = connection.execute(
            "SELECT position, state FROM runledger_events WHERE topic = 'follow-up.removed'"
        ).fetchone()
        payload = {
            key: value for key, value in orjson.loads(unpacked(state)).items() if key != "reason"
        }
        connection.execute(
            "UPDATE runledger_events SET state = ? WHERE position = ?",
            (orjson.dumps(payload), position),
        )

    with (
        open_store(f"sqlite:///{path}", clock=FakeClock()) as store,
        pytest.raises(CorruptEventError, match="field 'reason' is missing") as raised,
    ):
        store.verify_run(demo.logged_run)

    assert raised.value.message.startswith(f"Stored event at position {position}")
