"""The store a host gets forwards DESIGN.md's API and nothing else; the application under it
is wired to the library through public means only."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest
from eventsourcing.application import Application

from runledger.domain.application import WorkflowRuns
from runledger.domain.errors import InvalidCallError, RunAlreadyExistsError
from runledger.infrastructure.commits.wiring import StorageWiring
from runledger.infrastructure.storage.memory import MemoryStorage
from runledger.infrastructure.store import WorkflowStore, open_store

DESIGNED_API = frozenset(
    {
        # commands
        "create_run",
        "bind_origin_session",
        "record_progress",
        "pause_run",
        "resume_run",
        "set_presentation_instructions",
        "finish_run",
        "interrupt_run",
        "restart_run",
        "queue_follow_up",
        "remove_follow_up",
        "report_branch",
        "start_turn",
        "end_turn",
        "create_workflow_message",
        "publish_update",
        # settings
        "ensure_settings_scope",
        "change_settings",
        # human decisions
        "request_human_decision",
        "answer_human_decision",
        "apply_decision_timeout",
        "cancel_human_decision",
        "continue_after_decision",
        # consistent reads from aggregates
        "get_run",
        "get_follow_up",
        "get_workflow_message",
        "get_turn",
        "get_human_decision",
        "event_log",
        # run leases
        "claim_run",
        "renew_claim",
        "release_claim",
        # session recording
        "record_session_binding",
        "append_session_entry",
        "append_session_events",
        "update_session_capture",
        "session_segments",
        "session_entries",
        "session_events",
        # managed effects
        "reserve_effect",
        "settle_effect",
        "recover_applying_effects",
        "retry_effect",
        "get_effect",
        # read models
        "follow_up_queue",
        "follow_up_queue_range",
        "terminal_data",
        "viewer_deltas",
        "session_outbox",
        "next_deliverable",
        "settings_scopes",
        "settings_scope_at_change",
        "list_runs",
        # audit
        "audit_run",
        "verify_run",
        "export_run",
        # retention
        "prune_runs",
        "restore_runs",
        # operations
        "projection_status",
        "rebuild_projection",
        "read_model_digest",
        "projection_names",
        # read-your-writes across processes
        "position_token",
        "reading_after",
        "close",
    }
)
"""DESIGN.md "Public API" as far as it is built, plus ``close`` and the CLI's
``projection_names``."""

BYPASSES = (
    "save",
    "repository",
    "take_snapshot",
    "execute",
    "load",
    "mapper",
    "events",
    "snapshots",
    "recorder",
    "notification_log",
    "storage",
    "views",
    "projector",
    "catch_up",
    "rebuild_projections",
    "cancel_pending_for_source",
    "url",
    "app",
    "runtime",
)
"""What the store used to expose: the library's application and the store's machinery."""


def public_names(value: object) -> set[str]:
    return {name for name in dir(value) if not name.startswith("_")}


@pytest.fixture
def store() -> Iterator[WorkflowStore]:
    with open_store("memory://") as opened:
        yield opened


def test_the_store_class_exposes_exactly_the_designed_api() -> None:
    assert public_names(WorkflowStore) == DESIGNED_API


def test_an_open_store_exposes_exactly_the_designed_api(store: WorkflowStore) -> None:
    assert public_names(store) == DESIGNED_API


@pytest.mark.parametrize("name", BYPASSES)
def test_nothing_that_bypasses_the_rules_is_reachable_on_the_store(
    store: WorkflowStore, name: str
) -> None:
    assert not hasattr(store, name)


def test_the_store_is_not_an_eventsourcing_application() -> None:
    assert not issubclass(WorkflowStore, Application)


def followers() -> int:
    return sum(thread.name == "runledger-projections" for thread in threading.enumerate())


def test_leaving_the_store_as_a_context_manager_stops_its_follower_thread() -> None:
    before = followers()
    with open_store("memory://") as store:
        assert isinstance(store, WorkflowStore)
        assert followers() == before + 1

    assert followers() == before
    store.close()  # closing again does nothing


@pytest.mark.parametrize("name", sorted(DESIGNED_API))
def test_every_public_method_has_a_one_line_docstring(name: str) -> None:
    doc = getattr(WorkflowStore, name).__doc__

    assert doc, f"{name} has no docstring"
    assert "\n" not in doc.strip(), f"{name}'s docstring is longer than one line"


def test_a_forwarded_command_keeps_its_keyword_only_signature(store: WorkflowStore) -> None:
    with pytest.raises(InvalidCallError) as raised:
        store.create_run("run-1", "echo", {})  # type: ignore[call-arg]
    assert str(raised.value) == (
        "Too many positional arguments; WorkflowStore.create_run takes (run_id, *, "
        "workflow_name, input, workflow_ref, title, parent_run_id, status)"
    )
    assert store.list_runs().runs == []

    created = store.create_run("run-1", workflow_name="echo", input={"task": "reply"})

    assert (created.run_id, created.status) == ("run-1", "running")


# -- the application under the store ----------------------------------------------------------


def test_the_application_overrides_no_private_hook_of_the_library() -> None:
    overridden = {
        name
        for name in vars(WorkflowRuns)
        if name.startswith("_") and not name.startswith("__") and hasattr(Application, name)
    }

    assert overridden == set()


def test_on_commit_runs_once_after_each_command_that_saved_something() -> None:
    commits: list[int] = []
    storage = MemoryStorage()
    app = WorkflowRuns(
        StorageWiring(storage, on_commit=lambda: commits.append(storage.max_position()))
    )

    app.create_run("run-1", workflow_name="echo", input={})
    app.bind_origin_session("run-1", "session-1")

    assert commits == [1, 2], "each commit is reported after it is stored"


def test_on_commit_does_not_run_for_a_rejected_command_or_one_that_changed_nothing() -> None:
    commits: list[int] = []
    app = WorkflowRuns(StorageWiring(MemoryStorage(), on_commit=lambda: commits.append(1)))
    app.create_run("run-1", workflow_name="echo", input={})
    app.bind_origin_session("run-1", "session-1")
    commits.clear()

    with pytest.raises(RunAlreadyExistsError):
        app.create_run("run-1", workflow_name="echo", input={})
    app.get_run("run-1")
    app.bind_origin_session("run-1", "session-2")  # the first binding wins: nothing to save

    assert commits == []
