"""The four read models through the real store, on memory, a SQLite file and PostgreSQL.

Upstream §11 scenarios that read a read model (A13, D4, D7, F1-F3, I1-I5), read-your-writes
after every command kind, a stalled projection, and paging through a long follow-up queue.
Rebuilds, cross-backend equality and stores sharing a database are in
``test_read_model_rebuild.py``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import pytest

from runledger.domain.errors import ProjectionStalledError
from runledger.domain.ids import follow_up_message_id
from runledger.domain.records import (
    FollowUpQueue,
    TerminalData,
    ViewerDelta,
    ViewerDeltas,
    WorkflowMessageRecord,
)
from runledger.domain.values import ProgressStatus
from runledger.infrastructure.cli.generated_history import HistoryGenerator
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.views.store import PageCommit
from runledger.projections.base import ProjectedEvent, ViewWriter
from runledger.projections.viewer_deltas import viewer_tail_patch
from tests.integration.conftest import BACKENDS
from tests.support.clock import FakeClock
from tests.support.outbox_commands import cancel_pending_for_source
from tests.support.postgres import PostgresServer
from tests.support.scenario import (
    HUMAN,
    IC,
    OTHER_SESSION,
    RUN,
    SESSION,
    SESSION_ACTOR,
    WT,
    create,
    deliver,
    notify,
    present_terminal,
    queue,
    queued_id,
    restart,
    running_run,
    step,
    terminal_message_id_of,
    waiting_run,
)
from tests.support.viewer_pages import workflow_page_start

PARENT = "run-parent"
CHILD = "run-child"
SECOND_RUN = "run-2"
INTERRUPTED_REASON = "Workflow host stopped before the run finished"

T = TypeVar("T")


def present(value: T | None, what: str) -> T:
    """``value``, which the test needs to exist."""
    assert value is not None, f"{what} must exist"
    return value


def newest_deltas(store: WorkflowStore, run_id: str) -> list[ViewerDelta]:
    """The deltas of the run's newest presentation revision."""
    current = store.viewer_deltas(run_id, after_revision=0).current_revision
    page = store.viewer_deltas(run_id, after_revision=current - 1)
    assert isinstance(page, ViewerDeltas), f"revision {current} of {run_id} is not retained"
    return page.deltas


def outbox_entry(
    store: WorkflowStore, session_id: str, workflow_message_id: str
) -> WorkflowMessageRecord:
    """The message as the session outbox shows it."""
    [entry] = [
        message
        for message in store.session_outbox(session_id)
        if message.workflow_message_id == workflow_message_id
    ]
    return entry


def completed_with_presented_terminal(store: WorkflowStore, run_id: str = RUN) -> None:
    """R completes and its terminal message is delivered and answered (turn ended)."""
    store.finish_run(run_id, status="completed", final_output={"reply": "done"})
    present_terminal(store, run_id)


# -- A13: queue reads across a continuation ----------------------------------------------------


def a13_continued(store: WorkflowStore) -> None:
    """P waits at "wait" with a follow-up, then continues into C, which completes."""
    waiting_run(store, PARENT)
    queue(
        store, "waiting-follow-up", run_id=PARENT, actor=HUMAN, source=IC, prompt="Continue later"
    )
    create(store, CHILD, parent_run_id=PARENT)
    store.finish_run(CHILD, status="completed", final_output={"settings": {"mode": "b"}})


def test_a13_the_parent_keeps_its_follow_up_after_its_continuation_completes(
    store: WorkflowStore,
) -> None:
    a13_continued(store)

    parent_queue = store.follow_up_queue(PARENT)

    assert parent_queue is not None, "the bound parent must have a queue"
    assert [(f.prompt, f.order, f.state) for f in parent_queue.follow_ups] == [
        ("Continue later", 1, "queued")
    ], "the follow-up must stay on the parent, queued"


def test_a13_a_continuation_child_without_an_origin_binding_has_no_queue(
    store: WorkflowStore,
) -> None:
    a13_continued(store)

    assert store.follow_up_queue(CHILD) is None, "an unbound child has no queue (undefined)"


def test_a13_a_continuation_child_without_an_origin_binding_has_no_queue_range(
    store: WorkflowStore,
) -> None:
    a13_continued(store)

    assert store.follow_up_queue_range(CHILD, start=0, limit=10) is None, (
        "an unbound child has no queue range (null)"
    )


# -- F1-F3: terminal data ----------------------------------------------------------------------


@pytest.mark.parametrize("status", ["running", "waiting"])
def test_f1_a_running_or_waiting_run_has_no_terminal_data(
    store: WorkflowStore, status: ProgressStatus
) -> None:
    running_run(store)
    store.record_progress(RUN, status=status, waiting_on="wait" if status == "waiting" else None)

    assert store.terminal_data(RUN) is None, f"a {status} run has no terminal data"


def test_f1_an_unknown_run_has_no_terminal_data(store: WorkflowStore) -> None:
    assert store.terminal_data("nope") is None, "an unknown run has no terminal data"


def test_f2_a_completed_run_has_exactly_its_eight_terminal_fields(store: WorkflowStore) -> None:
    running_run(store)
    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    assert store.terminal_data(RUN) == TerminalData(
        run_id=RUN,
        status="completed",
        status_detail=None,
        input={"task": "reply"},
        final_output={"reply": "done"},
        error=None,
        presentation_instructions=(
            "Explain the final workflow result to the user in a normal response."
        ),
        restart_number=0,
    )


def test_f3_a_failed_run_reports_its_error_as_text_and_its_stored_instructions(
    store: WorkflowStore,
) -> None:
    running_run(store)
    store.set_presentation_instructions(RUN, "Summarise briefly.")
    store.finish_run(RUN, status="failed", error="boom")

    data = store.terminal_data(RUN)

    assert data is not None, "a failed run has terminal data"
    assert (data.status, data.error, data.final_output, data.presentation_instructions) == (
        "failed",
        "boom",
        None,
        "Summarise briefly.",
    )


# -- D4: session-wide order --------------------------------------------------------------------


def test_d4_messages_of_two_runs_share_one_session_wide_order(store: WorkflowStore) -> None:
    running_run(store, RUN)
    running_run(store, SECOND_RUN)
    notify(store, "notification-1", run_id=RUN)
    queue(store, "follow-1", run_id=SECOND_RUN)
    step(store, "interaction-1", run_id=RUN)
    notify(store, "notification-2", run_id=SECOND_RUN)

    outbox = store.session_outbox(SESSION)

    assert [(m.order, m.run_id, m.kind) for m in outbox] == [
        (1, RUN, "notification"),
        (2, SECOND_RUN, "followUp"),
        (3, RUN, "step"),
        (4, SECOND_RUN, "notification"),
    ], "orders must be 1, 2, 3, 4 across runs and kinds"


def test_d4_another_sessions_messages_start_again_at_1(store: WorkflowStore) -> None:
    running_run(store, RUN)
    running_run(store, SECOND_RUN, session_id=OTHER_SESSION)
    notify(store, "notification-1", run_id=RUN)
    notify(store, "notification-2", run_id=RUN)
    notify(store, "notification-3", run_id=SECOND_RUN)

    assert [m.order for m in store.session_outbox(OTHER_SESSION)] == [1], (
        "session-2's first message must get order 1"
    )


# -- D7: follow-up eligibility step by step ----------------------------------------------------


def test_d7_a_follow_up_is_not_deliverable_while_its_run_is_running(store: WorkflowStore) -> None:
    running_run(store)
    queue(store)

    assert store.next_deliverable(SESSION) is None, "R is running: nothing to deliver"


def test_d7_the_unsent_terminal_message_goes_before_the_follow_up(store: WorkflowStore) -> None:
    running_run(store)
    queue(store)
    store.finish_run(RUN, status="completed")

    deliverable = store.next_deliverable(SESSION)

    # Session order puts the follow-up's message (1) before the terminal one (2).
    assert deliverable is not None, "the terminal message of a completed run is deliverable"
    assert deliverable.workflow_message_id == terminal_message_id_of(store), (
        "the follow-up must wait for R's terminal message"
    )


def test_d7_a_follow_up_is_not_deliverable_while_the_terminal_turn_is_open(
    store: WorkflowStore,
) -> None:
    running_run(store)
    queue(store)
    store.finish_run(RUN, status="completed")
    present_terminal(store, end_turn=False)

    assert store.next_deliverable(SESSION) is None, "the terminal turn has not ended"


def test_d7_a_follow_up_is_deliverable_once_the_terminal_turn_ended(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    completed_with_presented_terminal(store)

    deliverable = store.next_deliverable(SESSION)

    assert deliverable is not None, "the follow-up must be released"
    assert deliverable.workflow_message_id == follow_up_message_id(follow_up_id)


def test_d7_a_later_follow_up_waits_while_the_earlier_ones_turn_is_open(
    store: WorkflowStore,
) -> None:
    running_run(store)
    first = queued_id(store, "follow-1")
    queue(store, "follow-2", prompt="Second task")
    completed_with_presented_terminal(store)
    deliver(store, follow_up_message_id(first), "entry-follow-1")
    store.start_turn(
        follow_up_message_id(first), run_id=RUN, target_session_id=SESSION, workflow_turn_id="t-1"
    )

    assert store.next_deliverable(SESSION) is None, "follow-1's turn is still open"


def test_d7_a_later_follow_up_is_deliverable_once_the_earlier_ones_turn_ended(
    store: WorkflowStore,
) -> None:
    running_run(store)
    first = queued_id(store, "follow-1")
    second = queued_id(store, "follow-2", prompt="Second task")
    completed_with_presented_terminal(store)
    deliver(store, follow_up_message_id(first), "entry-follow-1")
    store.start_turn(
        follow_up_message_id(first), run_id=RUN, target_session_id=SESSION, workflow_turn_id="t-1"
    )
    store.end_turn("t-1", stop_reason="completed")

    deliverable = store.next_deliverable(SESSION)

    assert deliverable is not None, "follow-2 must be released"
    assert deliverable.workflow_message_id == follow_up_message_id(second)


def test_d7_a_removed_earlier_follow_up_does_not_hold_back_a_later_one(
    store: WorkflowStore,
) -> None:
    running_run(store)
    first = queued_id(store, "follow-1")
    second = queued_id(store, "follow-2", prompt="Second task")
    store.remove_follow_up(RUN, first, actor=SESSION_ACTOR, source=WT)
    completed_with_presented_terminal(store)

    deliverable = store.next_deliverable(SESSION)

    assert deliverable is not None, "follow-2 must be released"
    assert deliverable.workflow_message_id == follow_up_message_id(second)


def test_d7_a_follow_up_is_not_deliverable_while_another_run_of_the_session_is_active(
    store: WorkflowStore,
) -> None:
    running_run(store)
    queue(store)
    completed_with_presented_terminal(store)
    running_run(store, SECOND_RUN)

    assert store.next_deliverable(SESSION) is None, "run-2 of session-1 is running"


def test_d7_a_follow_up_is_deliverable_once_the_other_run_of_the_session_settled(
    store: WorkflowStore,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    completed_with_presented_terminal(store)
    # Headless, so run-2 ends without a terminal message of its own to deliver first.
    running_run(store, SECOND_RUN, execution_mode="headless")
    store.finish_run(SECOND_RUN, status="cancelled")

    deliverable = store.next_deliverable(SESSION)

    assert deliverable is not None, "no other run of session-1 is active any more"
    assert deliverable.workflow_message_id == follow_up_message_id(follow_up_id)


# -- I1-I5: viewer deltas ----------------------------------------------------------------------


def test_i1_the_newest_revision_after_two_follow_ups_shows_the_follow_ups_inspector(
    store: WorkflowStore,
) -> None:
    running_run(store)
    first = queued_id(store, "follow-1")
    second = queued_id(store, "follow-2", prompt="Second task")
    current = store.viewer_deltas(RUN, after_revision=0).current_revision

    [settings, delta] = newest_deltas(store, RUN)

    # Delta 0 is the settings target (empty: R has no scopes), as upstream I1.
    assert (settings.delta_index, settings.target_type, settings.target_key) == (
        0,
        "inspector",
        "settings",
    )
    assert (delta.delta_index, delta.target_type, delta.target_key, delta.patch) == (
        1,
        "inspector",
        "follow-ups",
        [
            {"op": "replace", "path": "/presentationRevision", "value": current},
            {
                "op": "replace",
                "path": "/followUpQueue",
                "value": {
                    "items": [
                        {"followUpId": first, "order": 1, "source": WT, "state": "queued"},
                        {"followUpId": second, "order": 2, "source": WT, "state": "queued"},
                    ]
                },
            },
            {"op": "replace", "path": "/followUpStart", "value": 0},
            {"op": "replace", "path": "/followUpTotal", "value": 2},
        ],
    )


def test_i4_a_new_runs_viewer_is_at_revision_1_without_deltas(store: WorkflowStore) -> None:
    create(store)

    assert store.viewer_deltas(RUN, after_revision=1) == ViewerDeltas(
        current_revision=1, retained_from_revision=1, deltas=[]
    )


@pytest.mark.parametrize(
    ("old_total", "items", "expected"),
    [
        pytest.param(
            0,
            ["a"],
            [
                {"op": "append", "path": "/items", "value": ["a"]},
                {"op": "replace", "path": "/total", "value": 1},
            ],
            id="first-item",
        ),
        pytest.param(
            256,
            ["x"],
            [
                {"op": "remove", "path": "/items/0"},
                {"op": "append", "path": "/items", "value": ["x"]},
                {"op": "replace", "path": "/start", "value": 1},
                {"op": "replace", "path": "/total", "value": 257},
            ],
            id="window-slides",
        ),
        pytest.param(
            10,
            [f"item-{n}" for n in range(300)],
            [
                {"op": "replace", "path": "/items", "value": [f"item-{n}" for n in range(44, 300)]},
                {"op": "replace", "path": "/start", "value": 54},
                {"op": "replace", "path": "/total", "value": 310},
            ],
            id="window-replaced",
        ),
    ],
)
def test_i3_a_tail_patch_appends_slides_or_replaces_the_window(
    old_total: int, items: list[str], expected: list[dict[str, Any]]
) -> None:
    assert viewer_tail_patch(old_total, items) == expected


@pytest.mark.parametrize(
    ("total", "cursor", "start"),
    [(300, None, 44), (300, 0, 0), (300, 150, 22), (300, 299, 44)],
)
def test_i5_every_item_of_a_large_history_is_on_a_bounded_page(
    total: int, cursor: int | None, start: int
) -> None:
    assert workflow_page_start(total, cursor) == start


# -- read-your-writes: the very next query shows each command's effect -------------------------


def test_create_run_is_read_at_once_as_a_viewer_at_revision_1(store: WorkflowStore) -> None:
    create(store)

    assert store.viewer_deltas(RUN, after_revision=0).current_revision == 1


def test_bind_origin_session_is_read_at_once_as_an_empty_queue(store: WorkflowStore) -> None:
    create(store)

    store.bind_origin_session(RUN, SESSION)

    assert store.follow_up_queue(RUN) == FollowUpQueue(
        run_id=RUN, origin_session_id=SESSION, follow_ups=[]
    )


def test_record_progress_is_read_at_once_in_the_viewer_graph(store: WorkflowStore) -> None:
    running_run(store)

    store.record_progress(RUN, status="waiting", waiting_on="approval")

    [graph, _timeline] = newest_deltas(store, RUN)
    assert {"op": "replace", "path": "/state/status", "value": "waiting"} in graph.patch


def test_pause_run_is_read_at_once_as_an_undeliverable_step(store: WorkflowStore) -> None:
    running_run(store)
    step(store)

    store.pause_run(RUN, status_detail="Paused by the user")

    assert store.next_deliverable(SESSION) is None, "a paused run's step is not deliverable"


def test_resume_run_is_read_at_once_as_a_deliverable_step(store: WorkflowStore) -> None:
    running_run(store)
    message = step(store)
    store.pause_run(RUN)

    store.resume_run(RUN)

    deliverable = present(store.next_deliverable(SESSION), "a deliverable message")
    assert deliverable.workflow_message_id == message.workflow_message_id, (
        "the resumed run's step must be deliverable"
    )


def test_set_presentation_instructions_is_read_at_once_in_terminal_data(
    store: WorkflowStore,
) -> None:
    running_run(store)
    store.finish_run(RUN, status="completed")

    store.set_presentation_instructions(RUN, "Summarise briefly.")

    data = present(store.terminal_data(RUN), "terminal data")
    assert data.presentation_instructions == "Summarise briefly."


def test_queue_follow_up_is_read_at_once_as_a_pending_queue_item(store: WorkflowStore) -> None:
    running_run(store)

    follow_up_id = queued_id(store)

    read = present(store.follow_up_queue(RUN), "the queue")
    assert [(f.follow_up_id, f.state, f.delivery) for f in read.follow_ups] == [
        (follow_up_id, "queued", "pending")
    ]


def test_remove_follow_up_is_read_at_once_as_a_removed_undelivered_item(
    store: WorkflowStore,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store)

    store.remove_follow_up(RUN, follow_up_id, actor=SESSION_ACTOR, source=WT)

    read = present(store.follow_up_queue(RUN), "the queue")
    assert [(f.state, f.delivery) for f in read.follow_ups] == [("removed", "cancelled")]


def test_finish_run_is_read_at_once_in_terminal_data(store: WorkflowStore) -> None:
    running_run(store)

    store.finish_run(RUN, status="timed_out", status_detail="Deadline passed")

    data = present(store.terminal_data(RUN), "terminal data")
    assert (data.status, data.status_detail) == ("timed_out", "Deadline passed")


def test_interrupt_run_is_read_at_once_as_failed_terminal_data(store: WorkflowStore) -> None:
    running_run(store)

    store.interrupt_run(RUN)

    data = present(store.terminal_data(RUN), "terminal data")
    assert (data.status, data.error) == ("failed", INTERRUPTED_REASON)


def test_restart_run_is_read_at_once_as_the_childs_queue_in_the_origin_session(
    store: WorkflowStore,
) -> None:
    running_run(store)
    store.finish_run(RUN, status="failed", error="boom")

    receipt = restart(store)

    assert store.follow_up_queue(receipt.run_id) == FollowUpQueue(
        run_id=receipt.run_id, origin_session_id=SESSION, follow_ups=[]
    )


def test_create_workflow_message_is_read_at_once_in_the_session_outbox(
    store: WorkflowStore,
) -> None:
    running_run(store)

    message = notify(store)

    assert [m.workflow_message_id for m in store.session_outbox(SESSION)] == [
        message.workflow_message_id
    ]


def test_cancel_pending_for_source_is_read_at_once_in_the_session_outbox(
    store: WorkflowStore, runtime: StoreRuntime
) -> None:
    running_run(store)
    message = notify(store, "notification-1")

    cancel_pending_for_source(runtime.app, "notification-1", kind="notification")

    assert outbox_entry(store, SESSION, message.workflow_message_id).status == "cancelled"


def test_report_branch_is_read_at_once_as_a_sent_message(store: WorkflowStore) -> None:
    running_run(store)
    message = notify(store)

    deliver(store, message.workflow_message_id, "entry-7")

    entry = outbox_entry(store, SESSION, message.workflow_message_id)
    assert (entry.status, entry.pi_session_entry_id) == ("sent", "entry-7")


def test_start_turn_is_read_at_once_as_a_change_of_its_message(store: WorkflowStore) -> None:
    running_run(store)
    store.finish_run(RUN, status="completed")
    message_id = terminal_message_id_of(store)
    deliver(store, message_id, "entry-terminal")

    turn = store.start_turn(message_id, run_id=RUN, target_session_id=SESSION)

    assert outbox_entry(store, SESSION, message_id).updated_at == turn.started_at


def test_end_turn_is_read_at_once_as_a_released_follow_up(store: WorkflowStore) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    store.finish_run(RUN, status="completed")
    _, turn_id = present_terminal(store, end_turn=False)

    store.end_turn(turn_id, stop_reason="completed")

    deliverable = present(store.next_deliverable(SESSION), "a deliverable message")
    assert deliverable.workflow_message_id == follow_up_message_id(follow_up_id), (
        "the ended terminal turn must release the follow-up"
    )


# -- a projection that fails -------------------------------------------------------------------

BROKEN = "follow_up_queue"
OTHERS = ("terminal_data", "viewer_deltas", "session_outbox", "settings", "runs")
FAILURE = "projection bug under test"


@pytest.fixture
def broken_on_queue(
    store: WorkflowStore, runtime: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> WorkflowStore:
    """The store, with the follow-up queue projection raising on every ``follow-up.queued``."""
    projection = runtime.projector.runner(BROKEN).projection
    original = projection.apply

    def apply(event: ProjectedEvent, view: ViewWriter) -> None:
        if event.wire_name == "follow-up.queued":
            raise RuntimeError(FAILURE)
        original(event, view)

    monkeypatch.setattr(projection, "apply", apply)
    return store


def last_errors(store: WorkflowStore) -> dict[str, str | None]:
    """Each projection's last error, as ``projection_status()`` reports it."""
    return {status.name: status.last_error for status in store.projection_status()}


def test_a_command_succeeds_when_a_projection_fails_on_its_event(
    broken_on_queue: WorkflowStore,
) -> None:
    store = broken_on_queue
    running_run(store)

    queued = queue(store)

    assert store.get_follow_up(queued.follow_up.follow_up_id) == queued.follow_up


def test_projection_status_shows_the_error_of_the_failing_projection_only(
    broken_on_queue: WorkflowStore,
) -> None:
    store = broken_on_queue
    running_run(store)
    queue(store)

    errors = last_errors(store)

    assert FAILURE in (errors[BROKEN] or ""), f"{BROKEN} must report its error: {errors}"
    assert {name: errors[name] for name in OTHERS} == dict.fromkeys(OTHERS), (
        "the other projections must have no error"
    )


def test_the_queries_of_a_stalled_projection_raise_projection_stalled_error(
    broken_on_queue: WorkflowStore,
) -> None:
    store = broken_on_queue
    running_run(store)
    queue(store)

    with pytest.raises(ProjectionStalledError, match=f"^Projection {BROKEN} stopped "):
        store.follow_up_queue(RUN)
    with pytest.raises(ProjectionStalledError, match=f"^Projection {BROKEN} stopped "):
        store.follow_up_queue_range(RUN, start=0, limit=10)


def test_the_other_projections_keep_up_while_one_is_stalled(
    broken_on_queue: WorkflowStore,
) -> None:
    store = broken_on_queue
    running_run(store)
    first = queued_id(store, "follow-1")
    second = queued_id(store, "follow-2", prompt="Second task")
    store.finish_run(RUN, status="failed", error="boom")

    lags = {status.name: status.lag for status in store.projection_status()}

    assert {name: lags[name] for name in OTHERS} == dict.fromkeys(OTHERS, 0), lags
    assert [m.workflow_message_id for m in store.session_outbox(SESSION)] == [
        follow_up_message_id(first),
        follow_up_message_id(second),
        terminal_message_id_of(store),
    ], "the session outbox must show every message"


def test_rebuilding_a_fixed_projection_clears_its_error_and_shows_the_right_view(
    broken_on_queue: WorkflowStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = broken_on_queue
    running_run(store)
    follow_up_id = queued_id(store)
    monkeypatch.undo()

    store.rebuild_projection(BROKEN)

    assert last_errors(store)[BROKEN] is None, "the rebuild must clear the error"
    read = present(store.follow_up_queue(RUN), "the queue")
    assert [f.follow_up_id for f in read.follow_ups] == [follow_up_id]


# -- a view commit that fails (the database was busy or went away) -------------------------------


@pytest.fixture
def commit_fails_once(
    store: WorkflowStore, runtime: StoreRuntime, monkeypatch: pytest.MonkeyPatch
) -> WorkflowStore:
    """The store, caught up, whose next view commit fails as a locked SQLite file would."""
    running_run(store)
    store.projection_status()
    commit = runtime.views.commit
    failures = [sqlite3.OperationalError("database is locked")]

    def commit_failing_once(pages: Sequence[PageCommit]) -> None:
        if failures:
            raise failures.pop()
        commit(pages)

    monkeypatch.setattr(runtime.views, "commit", commit_failing_once)
    return store


def test_a_query_after_a_failed_view_commit_reads_the_command_all_the_same(
    commit_fails_once: WorkflowStore,
) -> None:
    store = commit_fails_once

    follow_up_id = queued_id(store)

    read = present(store.follow_up_queue(RUN), "the queue")
    assert [f.follow_up_id for f in read.follow_ups] == [follow_up_id], (
        "the page whose commit failed must be projected again"
    )


def test_projection_status_after_a_failed_view_commit_shows_no_lag(
    commit_fails_once: WorkflowStore,
) -> None:
    store = commit_fails_once
    queue(store)

    lags = {status.name: status.lag for status in store.projection_status()}

    assert lags == dict.fromkeys((BROKEN, *OTHERS), 0), "catch-up must close the lag"


# -- paging through a long queue ---------------------------------------------------------------

LONG_QUEUE = 2000
LONG_RUN = "long-run-1"
"""The first run of a ``HistoryGenerator`` with prefix "long"."""
PAGE = 256


@pytest.fixture(scope="module", params=BACKENDS)
def long_queue_store(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkflowStore]:
    """A store (shared by this module's tests) whose run has 2,000 follow-ups.

    The history comes from the real aggregates through the project's generator (some
    follow-ups removed, perhaps the rest cancelled), stored in batches, then projected: 2,000
    queue commands would take most of this file's time budget on PostgreSQL, and what is
    under test here is the range query, not queueing.
    """
    backend = request.param
    drop: Callable[[], None] = lambda: None  # noqa: E731
    if backend == "memory":
        url = "memory://"
    elif backend == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('long-queue') / 'runledger.db'}"
    else:
        server: PostgresServer = request.getfixturevalue("postgres_server")
        name = server.new_database_name()
        url = server.create_database(name)
        drop = lambda: server.drop_database(name)  # noqa: E731
    try:
        with open_runtime(url, clock=FakeClock()) as runtime:
            events = HistoryGenerator(prefix="long").run_events(LONG_QUEUE)
            for start in range(0, len(events), 1000):
                runtime.storage.events.insert_events(events[start : start + 1000])
            runtime.catch_up()
            yield WorkflowStore(runtime)
    finally:
        drop()


def pages_of_256(store: WorkflowStore) -> list[FollowUpQueue]:
    """The long queue read page by page, ``start`` moving on by 256 each time."""
    return [
        present(store.follow_up_queue_range(LONG_RUN, start=start, limit=PAGE), "a page")
        for start in range(0, LONG_QUEUE, PAGE)
    ]


def test_pages_of_256_cover_a_queue_of_2000_follow_ups_once_in_order(
    long_queue_store: WorkflowStore,
) -> None:
    pages = pages_of_256(long_queue_store)

    orders = [f.order for page in pages for f in page.follow_ups]

    assert orders == list(range(1, LONG_QUEUE + 1)), "each follow-up exactly once, by order"


def test_the_pages_of_a_long_queue_join_up_to_the_whole_queue(
    long_queue_store: WorkflowStore,
) -> None:
    whole = long_queue_store.follow_up_queue(LONG_RUN)

    joined = [f for page in pages_of_256(long_queue_store) for f in page.follow_ups]

    assert joined == present(whole, "the whole queue").follow_ups


def test_a_page_past_the_end_of_a_long_queue_is_empty(long_queue_store: WorkflowStore) -> None:
    page = long_queue_store.follow_up_queue_range(LONG_RUN, start=LONG_QUEUE, limit=PAGE)

    assert present(page, "the page").follow_ups == []


def test_a_full_page_of_a_long_queue_holds_256_follow_ups(
    long_queue_store: WorkflowStore,
) -> None:
    page = long_queue_store.follow_up_queue_range(LONG_RUN, start=PAGE * 3, limit=PAGE)

    assert [f.order for f in present(page, "the page").follow_ups] == list(
        range(PAGE * 3 + 1, PAGE * 4 + 1)
    )


def test_outbox_records_are_the_records_validation_makes(store: WorkflowStore) -> None:
    """The outbox builds its records from view rows without validating them again
    (``Record.trusted``): each is equal to, and dumps as, the record validation makes."""
    running_run(store, session_id=SESSION)
    queue(store)
    notify(store)
    step(store)

    messages = store.session_outbox(SESSION)
    deliverable = store.next_deliverable(SESSION)

    assert [m.kind for m in messages] == ["followUp", "notification", "step"]
    for message in [*messages, present(deliverable, "a deliverable message")]:
        validated = WorkflowMessageRecord.model_validate(message.model_dump())
        assert message == validated
        assert message.model_dump_json() == validated.model_dump_json()
        assert repr(message) == repr(validated)
