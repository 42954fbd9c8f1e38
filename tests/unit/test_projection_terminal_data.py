"""The terminal data projection (upstream §6; §11 F1-F4), driven by the real domain on the
memory store and read back through a dict-backed view."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runledger.domain.records import TerminalData
from runledger.domain.runs import Run
from runledger.domain.values import TerminalStatus
from runledger.projections.base import Projection
from runledger.projections.events import projected
from runledger.projections.terminal_data import TerminalDataProjection, terminal_data
from tests.support.fake_view import FakeView, StoreWithLog, open_memory_store_with_log, project_log
from tests.support.scenario import (
    INPUT,
    RUN,
    create,
    fail_restart_chain,
    restart,
    running_run,
    waiting_run,
)

PROJECTION: Projection = TerminalDataProjection()
DEFAULT_INSTRUCTIONS = "Explain the final workflow result to the user in a normal response."


@pytest.fixture
def store() -> Iterator[StoreWithLog]:
    with open_memory_store_with_log() as opened:
        yield opened


def view_of(store: StoreWithLog) -> FakeView:
    return project_log(PROJECTION, store.storage)


def data_of(store: StoreWithLog, run_id: str = RUN) -> TerminalData | None:
    return terminal_data(view_of(store), run_id)


def ended_data(store: StoreWithLog, run_id: str = RUN) -> TerminalData:
    found = data_of(store, run_id)
    assert found is not None
    return found


# -- F1: runs that have not ended ----------------------------------------------------------


def test_an_unknown_run_has_no_terminal_data(store: StoreWithLog) -> None:
    running_run(store)

    assert data_of(store, "ghost") is None


def test_a_running_run_has_no_terminal_data(store: StoreWithLog) -> None:
    running_run(store)

    assert data_of(store) is None


def test_a_waiting_run_has_no_terminal_data(store: StoreWithLog) -> None:
    waiting_run(store)

    assert data_of(store) is None


def test_a_queued_restart_child_has_no_terminal_data(store: StoreWithLog) -> None:
    running_run(store)
    store.finish_run(RUN, status="failed", error="boom")

    child = restart(store).run_id

    assert data_of(store, child) is None


# -- F2, F3: ended runs --------------------------------------------------------------------


def test_a_completed_run_has_its_eight_terminal_fields(store: StoreWithLog) -> None:
    running_run(store, input={"task": "reply"})

    store.finish_run(RUN, status="completed", final_output={"reply": "done"})

    assert data_of(store) == TerminalData(
        run_id=RUN,
        status="completed",
        status_detail=None,
        input={"task": "reply"},
        final_output={"reply": "done"},
        error=None,
        presentation_instructions=DEFAULT_INSTRUCTIONS,
        restart_number=0,
    )


def test_a_failed_run_has_its_error_text_and_stored_instructions(store: StoreWithLog) -> None:
    running_run(store)
    store.set_presentation_instructions(RUN, "Summarise briefly.")

    store.finish_run(RUN, status="failed", error="boom")

    found = ended_data(store)
    assert (found.status, found.error, found.final_output, found.presentation_instructions) == (
        "failed",
        "boom",
        None,
        "Summarise briefly.",
    )


def test_an_error_that_looks_like_json_stays_text(store: StoreWithLog) -> None:
    running_run(store)

    store.finish_run(RUN, status="failed", error='{"code": 1}')

    assert ended_data(store).error == '{"code": 1}'


@pytest.mark.parametrize("status", ["timed_out", "cancelled"])
def test_a_run_ending_timed_out_or_cancelled_has_terminal_data(
    store: StoreWithLog, status: TerminalStatus
) -> None:
    running_run(store)

    store.finish_run(RUN, status=status)

    assert ended_data(store).status == status


def test_the_status_detail_comes_from_the_end_of_the_run(store: StoreWithLog) -> None:
    running_run(store)

    store.finish_run(RUN, status="cancelled", status_detail="Cancelled by the user")

    assert ended_data(store).status_detail == "Cancelled by the user"


def test_a_pause_detail_does_not_outlive_the_end_of_the_run(store: StoreWithLog) -> None:
    running_run(store)
    store.pause_run(RUN, status_detail="Paused for review")

    store.finish_run(RUN, status="completed")

    assert ended_data(store).status_detail is None


def test_an_interrupted_run_has_failed_with_the_interruption_as_error(
    store: StoreWithLog,
) -> None:
    running_run(store)

    store.interrupt_run(RUN)

    found = ended_data(store)
    assert (found.status, found.error) == (
        "failed",
        "Workflow host stopped before the run finished",
    )


def test_instructions_stored_after_the_end_are_answered(store: StoreWithLog) -> None:
    running_run(store)
    store.finish_run(RUN, status="completed")

    store.set_presentation_instructions(RUN, "Summarise briefly.")

    assert ended_data(store).presentation_instructions == "Summarise briefly."


def test_terminal_data_agrees_with_the_run_aggregate(store: StoreWithLog) -> None:
    running_run(store)
    store.set_presentation_instructions(RUN, "Summarise briefly.")
    store.finish_run(RUN, status="failed", final_output=[1, 2], error="boom", status_detail="x")

    run = store.get_run(RUN)

    assert run is not None
    assert ended_data(store) == TerminalData(
        run_id=run.run_id,
        status=Run.check_finish_status(run.status),
        status_detail=run.status_detail,
        input=run.input,
        final_output=run.final_output,
        error=run.error,
        presentation_instructions="Summarise briefly.",
        restart_number=run.restart_number,
    )


# -- lineage -------------------------------------------------------------------------------


def test_a_restarted_run_has_its_restart_number(store: StoreWithLog) -> None:
    last = fail_restart_chain(store, 2)

    found = ended_data(store, last)

    assert (found.restart_number, found.error, found.input) == (2, "boom 2", INPUT)


def test_a_continuation_of_a_restart_inherits_its_restart_number(store: StoreWithLog) -> None:
    restarted = fail_restart_chain(store, 1)
    create(store, "continuation", parent_run_id=restarted)

    store.finish_run("continuation", status="completed")

    assert ended_data(store, "continuation").restart_number == 1


# -- the projection itself -----------------------------------------------------------------


def test_the_projection_consumes_only_run_creation_instructions_and_ends() -> None:
    assert PROJECTION.topics == {
        "run.created",
        "run.presentation-instructions-set",
        "run.finished",
    }


def test_every_table_has_the_projection_prefix() -> None:
    assert [table.name for table in PROJECTION.tables] == ["rl_td_runs"]


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
    last_restart = fail_restart_chain(store, 1)
    store.set_presentation_instructions(last_restart, "Summarise briefly.")
    running_run(store, "other")
    store.finish_run("other", status="completed", final_output={"reply": "done"})
    waiting_run(store, "waiting")
    whole = view_of(store).tables
    last = store.storage.max_position()

    for split in range(1, last):
        assert project_in_two_parts(store, split).tables == whole, split
