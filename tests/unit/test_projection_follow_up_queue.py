"""The follow-up queue projection (upstream §4.4, §4.9; §11 A2, A5, A13, B, C), driven by the
real domain on the memory store and read back through a dict-backed view."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from runledger.domain.errors import InvalidPageError
from runledger.domain.records import FollowUpQueue
from runledger.domain.values import Actor, TerminalStatus
from runledger.projections.base import Projection, Table
from runledger.projections.events import projected
from runledger.projections.follow_up_queue import (
    FollowUpQueueProjection,
    follow_up_queue,
    follow_up_queue_range,
)
from tests.support.fake_view import FakeView, StoreWithLog, open_memory_store_with_log, project_log
from tests.support.scenario import (
    CONTROLLER,
    CR,
    HUMAN,
    IC,
    RUN,
    SESSION,
    create,
    deliver,
    follow_up_message,
    queue,
    queued_id,
    running_run,
    waiting_run,
)

PROJECTION: Projection = FollowUpQueueProjection()


@pytest.fixture
def store() -> Iterator[StoreWithLog]:
    with open_memory_store_with_log() as opened:
        yield opened


def view_of(store: StoreWithLog) -> FakeView:
    return project_log(PROJECTION, store.storage)


def queue_of(store: StoreWithLog, run_id: str = RUN) -> FollowUpQueue | None:
    return follow_up_queue(view_of(store), run_id)


def whole_queue(store: StoreWithLog, run_id: str = RUN) -> FollowUpQueue:
    found = queue_of(store, run_id)
    assert found is not None
    return found


def summary(store: StoreWithLog, run_id: str = RUN) -> list[tuple[int, str, str | None]]:
    """(order, state, delivery) of each follow-up in the run's queue."""
    return [(f.order, f.state, f.delivery) for f in whole_queue(store, run_id).follow_ups]


def queue_several(store: StoreWithLog, count: int) -> list[str]:
    return [queued_id(store, f"follow-{n}", prompt=f"Task {n}") for n in range(1, count + 1)]


# -- which runs have a queue ----------------------------------------------------------------


def test_an_unknown_run_has_no_queue(store: StoreWithLog) -> None:
    running_run(store)

    assert queue_of(store, "ghost") is None


def test_a_run_without_an_origin_session_has_no_queue(store: StoreWithLog) -> None:
    create(store)

    assert queue_of(store) is None


def test_a_bound_run_without_follow_ups_has_an_empty_queue(store: StoreWithLog) -> None:
    running_run(store)

    assert queue_of(store) == FollowUpQueue(run_id=RUN, origin_session_id=SESSION, follow_ups=[])


# -- A2, A5: the queue and its delivery ----------------------------------------------------


def test_lists_the_run_follow_ups_in_order_with_its_origin_session(store: StoreWithLog) -> None:
    running_run(store)
    queue(store, "follow-1", prompt="First task")
    queue(store, "follow-2", prompt="Second task")

    found = whole_queue(store)

    assert found.origin_session_id == SESSION
    assert [(f.order, f.prompt, f.state) for f in found.follow_ups] == [
        (1, "First task", "queued"),
        (2, "Second task", "queued"),
    ]


def test_each_item_equals_the_aggregate_record_apart_from_delivery(store: StoreWithLog) -> None:
    running_run(store)
    removed, sent, cancelled = queue_several(store, 3)
    queue(store, "follow-4", actor=HUMAN, source=IC)
    store.remove_follow_up(RUN, removed, actor=HUMAN, source=IC)
    deliver(store, follow_up_message(store, sent).workflow_message_id)
    store.finish_run(RUN, status="failed", error="boom")

    items = whole_queue(store).follow_ups

    assert [f.follow_up_id for f in items][:3] == [removed, sent, cancelled]
    for item in items:
        assert item.model_copy(update={"delivery": None}) == store.get_follow_up(item.follow_up_id)


def test_a_new_follow_up_is_pending_delivery(store: StoreWithLog) -> None:
    running_run(store)
    queue_several(store, 2)

    assert summary(store) == [(1, "queued", "pending"), (2, "queued", "pending")]


def test_delivery_becomes_sent_when_the_branch_reports_the_message(
    store: StoreWithLog,
) -> None:
    running_run(store)
    first, _ = queue_several(store, 2)

    deliver(store, follow_up_message(store, first).workflow_message_id, "entry-1")

    assert summary(store) == [(1, "queued", "sent"), (2, "queued", "pending")]


def test_a_cancelled_message_reported_in_the_branch_turns_sent(store: StoreWithLog) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    deliver(store, follow_up_message(store, follow_up_id).workflow_message_id)

    assert summary(store) == [(1, "removed", "sent")]


# -- removal and cascade cancellation ------------------------------------------------------


def test_a_removed_follow_up_keeps_its_place_with_the_removal_reason(
    store: StoreWithLog,
) -> None:
    running_run(store)
    first, _ = queue_several(store, 2)

    store.remove_follow_up(RUN, first, actor=HUMAN, source=IC)

    [removed, kept] = whole_queue(store).follow_ups
    assert (removed.state, removed.reason, removed.delivery) == (
        "removed",
        "Removed before delivery",
        "cancelled",
    )
    assert (kept.state, kept.delivery) == ("queued", "pending")


def test_a_failed_run_cancels_its_queued_follow_ups_with_its_error(store: StoreWithLog) -> None:
    running_run(store)
    queue_several(store, 2)

    store.finish_run(RUN, status="failed", error="boom")

    assert [(f.state, f.reason, f.delivery) for f in whole_queue(store).follow_ups] == [
        ("cancelled", "boom", "cancelled"),
        ("cancelled", "boom", "cancelled"),
    ]


def test_a_run_timing_out_without_error_cancels_with_its_status(store: StoreWithLog) -> None:
    running_run(store)
    queue_several(store, 1)

    store.finish_run(RUN, status="timed_out")

    [item] = whole_queue(store).follow_ups
    assert (item.state, item.reason) == ("cancelled", "Workflow ended with status timed_out")


def test_a_completed_run_leaves_its_follow_ups_queued_and_pending(store: StoreWithLog) -> None:
    running_run(store)
    queue_several(store, 2)

    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    assert summary(store) == [(1, "queued", "pending"), (2, "queued", "pending")]


def test_a_sent_follow_up_stays_queued_and_sent_when_its_run_fails(store: StoreWithLog) -> None:
    running_run(store)
    follow_up_id = queued_id(store)
    deliver(store, follow_up_message(store, follow_up_id).workflow_message_id)

    store.finish_run(RUN, status="failed", error="boom")

    assert summary(store) == [(1, "queued", "sent")]


def test_a_removed_follow_up_stays_removed_when_its_run_is_cancelled(
    store: StoreWithLog,
) -> None:
    running_run(store)
    follow_up_id = queued_id(store, actor=CONTROLLER, source=CR)
    store.remove_follow_up(RUN, follow_up_id, actor=HUMAN, source=IC)

    store.finish_run(RUN, status="cancelled")

    [item] = whole_queue(store).follow_ups
    assert (item.state, item.reason, item.delivery) == (
        "removed",
        "Removed before delivery",
        "cancelled",
    )


# -- A13 and lineage -----------------------------------------------------------------------


def continue_into_child(
    store: StoreWithLog, *, status: TerminalStatus, error: str | None = None
) -> None:
    """P waits with a human follow-up; the engine continues it into child C, which ends."""
    waiting_run(store, "parent")
    queue(
        store,
        "waiting-follow-up",
        run_id="parent",
        actor=Actor("human"),
        source=IC,
        prompt="Continue later",
    )
    create(store, "child", parent_run_id="parent")
    store.record_progress("child", status="running", current_node="work")
    store.finish_run("child", status=status, error=error)


def test_a_continuation_leaves_the_follow_ups_on_the_parent(store: StoreWithLog) -> None:
    continue_into_child(store, status="completed")

    assert [(f.prompt, f.order, f.state) for f in whole_queue(store, "parent").follow_ups] == [
        ("Continue later", 1, "queued")
    ]


def test_a_continuation_child_without_origin_binding_has_no_queue(
    store: StoreWithLog,
) -> None:
    continue_into_child(store, status="completed")

    assert queue_of(store, "child") is None


def test_a_failing_continuation_cancels_the_parent_follow_up_in_its_queue(
    store: StoreWithLog,
) -> None:
    continue_into_child(store, status="failed", error="child failed")

    [item] = whole_queue(store, "parent").follow_ups
    assert (item.run_id, item.state, item.reason, item.delivery) == (
        "parent",
        "cancelled",
        "child failed",
        "cancelled",
    )


# -- adoption ------------------------------------------------------------------------------


def test_adopting_a_repeated_request_leaves_the_view_unchanged(store: StoreWithLog) -> None:
    running_run(store)
    queue(store, "follow-1")
    before = view_of(store).tables

    adopted = queue(store, "follow-1")

    assert adopted.adopted is True
    assert view_of(store).tables == before


# -- ranges --------------------------------------------------------------------------------


def test_a_range_holds_the_follow_ups_at_offsets_start_to_start_plus_limit(
    store: StoreWithLog,
) -> None:
    running_run(store)
    queue_several(store, 5)

    found = follow_up_queue_range(view_of(store), RUN, start=1, limit=2)

    assert found is not None
    assert found.origin_session_id == SESSION
    assert [f.order for f in found.follow_ups] == [2, 3]


def test_a_range_from_the_start_equals_the_whole_queue(store: StoreWithLog) -> None:
    running_run(store)
    queue_several(store, 3)
    view = view_of(store)

    assert follow_up_queue_range(view, RUN, start=0, limit=3) == follow_up_queue(view, RUN)


def test_a_range_past_the_end_is_empty(store: StoreWithLog) -> None:
    running_run(store)
    queue_several(store, 3)

    found = follow_up_queue_range(view_of(store), RUN, start=3, limit=10)

    assert found == FollowUpQueue(run_id=RUN, origin_session_id=SESSION, follow_ups=[])


def test_a_range_with_limit_zero_is_empty(store: StoreWithLog) -> None:
    running_run(store)
    queue_several(store, 3)

    found = follow_up_queue_range(view_of(store), RUN, start=0, limit=0)

    assert found is not None
    assert found.follow_ups == []


def test_a_range_of_a_run_without_an_origin_session_is_none(store: StoreWithLog) -> None:
    create(store)

    assert follow_up_queue_range(view_of(store), RUN, start=0, limit=10) is None


@pytest.mark.parametrize(
    ("start", "limit", "message"),
    [
        (-1, 10, "Workflow follow-up start must be a non-negative integer"),
        (0, -1, "Workflow follow-up limit must be a non-negative integer"),
        (True, 10, "Workflow follow-up start must be a non-negative integer"),
        (0, 2.0, "Workflow follow-up limit must be a non-negative integer"),
        ("0", 10, "Workflow follow-up start must be a non-negative integer"),
        (0, None, "Workflow follow-up limit must be a non-negative integer"),
    ],
)
def test_a_range_rejects_a_start_or_limit_that_is_not_a_non_negative_integer(
    store: StoreWithLog, start: Any, limit: Any, message: str
) -> None:
    running_run(store)

    with pytest.raises(InvalidPageError) as caught:
        follow_up_queue_range(view_of(store), RUN, start=start, limit=limit)

    assert str(caught.value) == message


class ScanRecorder(FakeView):
    """A fake view that remembers the arguments of each scan."""

    def __init__(self, view: FakeView) -> None:
        super().__init__()
        self.tables = view.tables
        self.scans: list[dict[str, Any]] = []

    def scan(self, table: Table, **kwargs: Any) -> list[dict[str, Any]]:
        self.scans.append({"table": table.name, **kwargs})
        return super().scan(table, **kwargs)


def test_a_range_reads_by_order_number_rather_than_skipping_an_offset(
    store: StoreWithLog,
) -> None:
    running_run(store)
    queue_several(store, 4)
    reader = ScanRecorder(view_of(store))

    follow_up_queue_range(reader, RUN, start=2, limit=1)

    assert reader.scans == [
        {
            "table": "rl_fuq_follow_ups",
            "equals": {"run_id": RUN},
            "order_by": "order_number",
            "after": 2,
            "limit": 1,
        }
    ]


# -- the projection itself -----------------------------------------------------------------


def test_the_projection_consumes_only_run_follow_up_and_message_lifecycle_events() -> None:
    assert PROJECTION.topics == {
        "run.created",
        "run.session-bound",
        "follow-up.queued",
        "follow-up.removed",
        "follow-up.cancelled",
        "workflow-message.created",
        "workflow-message.sent",
        "workflow-message.cancelled",
    }


def test_every_table_has_the_projection_prefix() -> None:
    assert [table.name for table in PROJECTION.tables] == ["rl_fuq_runs", "rl_fuq_follow_ups"]


def project_in_two_parts(store: StoreWithLog, split: int) -> FakeView:
    """Apply the log's first ``split`` events, then the rest, to one view."""
    view = FakeView()
    first = store.storage.select_log(after=0, limit=split)
    rest = store.storage.select_log(after=first[-1].id, limit=10**9)
    for part in (first, rest):
        for notification in part:
            event = projected(notification)
            if event.wire_name in PROJECTION.topics:
                PROJECTION.apply(event, view)
    return view


def test_applying_the_log_in_two_parts_gives_the_same_view_as_one_pass(
    store: StoreWithLog,
) -> None:
    running_run(store)
    removed, sent, _ = queue_several(store, 3)
    store.remove_follow_up(RUN, removed, actor=HUMAN, source=IC)
    deliver(store, follow_up_message(store, sent).workflow_message_id)
    continue_into_child(store, status="failed", error="child failed")
    store.finish_run(RUN, status="failed", error="boom")
    whole = view_of(store).tables
    last = store.storage.max_position()

    for split in range(1, last):
        assert project_in_two_parts(store, split).tables == whole, split
