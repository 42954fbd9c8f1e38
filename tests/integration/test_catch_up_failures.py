"""A catch-up that fails is recorded, not swallowed: ``projection_status`` shows it as each
projection's ``last_error`` until a catch-up succeeds, and closing the store still closes.

Memory has no table another connection can take away, so on every backend the fault is the
log read failing; on a SQLite file and PostgreSQL a view table renamed away fails the page's
commit too, as a real fault would."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from runledger.domain.errors import StoreClosedError
from runledger.domain.ports import LogEntry
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.projections.follow_up_queue import FOLLOW_UPS
from tests.integration.test_read_your_writes import rename
from tests.integration.test_same_commit_views import queue_as_session
from tests.support.scenario import RUN, running_run


class LogUnreadableError(Exception):
    """The fault: the event log cannot be read."""


def unreadable_log(*, after: int, limit: int) -> Sequence[LogEntry]:
    raise LogUnreadableError("the log is unreadable")


def errors(runtime: StoreRuntime) -> dict[str, str | None]:
    return {status.name: status.last_error for status in runtime.projection_status()}


def test_a_failed_catch_up_shows_as_every_projections_last_error(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_runtime(store_url) as runtime:
        running_run(WorkflowStore(runtime), session_id="session-1")
        position = runtime.storage.max_position()
        monkeypatch.setattr(runtime.storage, "read_log", unreadable_log)

        shown = errors(runtime)

        assert set(shown.values()) == {
            f"catch-up failed at position {position}: LogUnreadableError: the log is unreadable"
        }
        monkeypatch.undo()


def test_a_catch_up_that_succeeds_again_clears_the_error(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with open_runtime(store_url) as runtime:
        monkeypatch.setattr(runtime.storage, "read_log", unreadable_log)
        assert all(errors(runtime).values())
        monkeypatch.undo()

        assert set(errors(runtime).values()) == {None}


def test_a_store_whose_catch_up_fails_still_closes(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = open_runtime(store_url)
    monkeypatch.setattr(runtime.storage, "read_log", unreadable_log)

    runtime.close()

    with pytest.raises(StoreClosedError):
        WorkflowStore(runtime).projection_status()
    monkeypatch.undo()


def test_a_view_table_taken_away_shows_in_the_status_until_it_is_back(durable_url: str) -> None:
    with open_runtime(durable_url) as runtime:
        store = WorkflowStore(runtime)
        running_run(store, session_id="session-1")
        table = runtime.views.physical_name(FOLLOW_UPS, runtime.views.active_slot(FOLLOW_UPS))
        rename(durable_url, table, f"{table}_away")
        queue_as_session(store, RUN, "request-1")

        failed = errors(runtime)

        assert all(
            error is not None and error.startswith("catch-up failed at position ")
            for error in failed.values()
        ), failed
        rename(durable_url, f"{table}_away", table)
        assert set(errors(runtime).values()) == {None}
