"""Rules of the Run aggregate (upstream §1.2, §3.4, §3.5, §3.8, §5.6, §5.7)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from runledger.domain.errors import (
    CancelledRunRestartError,
    EmptyPresentationInstructionsError,
    InvalidExecutionModeError,
    InvalidRunFieldError,
    InvalidRunIdError,
    InvalidRunStatusError,
    InvalidSessionIdError,
    InvalidWorkflowNameError,
    NonFiniteJsonNumberError,
    NotPlainJsonError,
    PresentationInstructionsChangedError,
    RestartLimitError,
    RunAlreadyEndedError,
    RunNotAcceptingChangesError,
    RunOfAnotherSessionError,
)
from runledger.domain.runs import Run, check_run_id, run_aggregate_id
from runledger.domain.values import Actor, LineageKind, RunStatus, TerminalStatus
from tests.support.specification import Event, events_of, given

NOW = datetime(2026, 1, 1, tzinfo=UTC)
LATER = NOW + timedelta(minutes=1)
HOST = Actor("host")
HOST_JSON = {"type": "host", "id": None}
F7_FINGERPRINT = "96eeb2504de7d6d9f3b48c7fb61a8db885d657d807eb63a3b5a2c47f069ac4b9"
DEFAULT_INSTRUCTIONS = "Explain the final workflow result to the user in a normal response."

RunCommand = Callable[[Run], object]


def new_run(
    run_id: str = "run-1",
    *,
    workflow_name: Any = "echo",
    input: Any = None,
    workflow_ref: Any = None,
    title: Any = None,
    status: RunStatus = "running",
    parent: Run | None = None,
    lineage_kind: LineageKind | None = None,
    parent_terminal_fingerprint: str | None = None,
    now: datetime = NOW,
) -> Run:
    return Run.create(
        run_id,
        workflow_name=workflow_name,
        input={"task": "reply"} if input is None else input,
        workflow_ref=workflow_ref,
        title=title,
        status=status,
        parent=parent,
        lineage_kind=lineage_kind,
        parent_terminal_fingerprint=parent_terminal_fingerprint,
        actor=HOST,
        now=now,
    )


def history(*commands: RunCommand, **create: Any) -> list[Event]:
    """The events of a run created with ``create`` and then given ``commands``."""
    return events_of(new_run(**create), *commands)


def bound(session_id: str = "session-1", mode: str = "interactive") -> RunCommand:
    return lambda run: run.bind_origin_session(session_id, mode, actor=HOST, now=NOW)


def progressed(
    status: str,
    *,
    node: str | None = None,
    attempt: str | None = None,
    waiting_on: str | None = None,
    detail: str | None = None,
    now: datetime = NOW,
) -> RunCommand:
    return lambda run: run.record_progress(
        status=status,
        current_node=node,
        current_attempt_id=attempt,
        waiting_on=waiting_on,
        status_detail=detail,
        actor=HOST,
        now=now,
    )


def paused(detail: str | None = "paused") -> RunCommand:
    return lambda run: run.pause(status_detail=detail, actor=HOST, now=NOW)


def instructed(instructions: object) -> RunCommand:
    return lambda run: run.set_presentation_instructions(instructions, actor=HOST, now=NOW)


def finished(
    status: TerminalStatus = "completed",
    *,
    final_output: Any = None,
    error: str | None = None,
    detail: str | None = None,
    terminal_message_id: str | None = None,
    now: datetime = LATER,
) -> RunCommand:
    return lambda run: run.finish(
        status=status,
        final_output=final_output,
        error=error,
        status_detail=detail,
        interrupted=False,
        terminal_message_id=terminal_message_id,
        actor=HOST,
        now=now,
    )


def ended_run(run_id: str, status: TerminalStatus, error: str | None = None, **create: Any) -> Run:
    run = new_run(run_id, **create)
    finished(status, error=error)(run)
    run.collect_events()
    return run


def restart_chain(length: int) -> Run:
    """A root run and ``length`` successive restarts of it; returns the last one."""
    run = ended_run("root-run", "failed")
    for number in range(1, length + 1):
        run = ended_run(f"restart-{number}", "failed", parent=run, lineage_kind="restart")
    return run


# -- run ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("run_id", ["r", "0", "run-1", "a.b_c-D9", "R" + "x" * 199])
def test_run_id_of_letters_digits_dots_underscores_and_dashes_is_valid(run_id: str) -> None:
    assert check_run_id(run_id) == run_id


@pytest.mark.parametrize(
    ("run_id", "message"),
    [
        ("", 'Invalid workflow run id: ""'),
        ("-run", 'Invalid workflow run id: "-run"'),
        (".run", 'Invalid workflow run id: ".run"'),
        ("run 1", 'Invalid workflow run id: "run 1"'),
        ("run/1", 'Invalid workflow run id: "run/1"'),
        ("run-1\n", 'Invalid workflow run id: "run-1\\n"'),
        ("R" + "x" * 200, f'Invalid workflow run id: "R{"x" * 200}"'),
        ('say "hi"', 'Invalid workflow run id: "say \\"hi\\""'),
    ],
)
def test_invalid_run_id_is_rejected_with_the_id_json_quoted(run_id: str, message: str) -> None:
    with pytest.raises(InvalidRunIdError) as raised:
        check_run_id(run_id)
    assert str(raised.value) == message


def test_invalid_non_ascii_run_id_is_quoted_as_json_stringify_does() -> None:
    with pytest.raises(InvalidRunIdError) as raised:
        check_run_id("café au lait")
    assert str(raised.value) == 'Invalid workflow run id: "café au lait"'


def test_run_aggregate_id_is_the_uuid5_of_the_run_id() -> None:
    assert str(run_aggregate_id("run-1")) == "331bfa57-196a-55de-8a1a-9598fcebd302"


# -- creating -------------------------------------------------------------------------------


def test_creating_a_root_run_records_it_as_the_root_of_its_own_chain() -> None:
    given(Run, []).when_creating(lambda: new_run(title="Reply")).then(
        [
            (
                "run.created",
                {
                    "run_id": "run-1",
                    "workflow_name": "echo",
                    "workflow_ref": "echo",
                    "title": "Reply",
                    "input": {"task": "reply"},
                    "status": "running",
                    "parent_run_id": None,
                    "root_run_id": "run-1",
                    "lineage_kind": None,
                    "restart_number": 0,
                    "parent_terminal_fingerprint": None,
                    "actor": HOST_JSON,
                    "timestamp": NOW,
                    "originator_id": run_aggregate_id("run-1"),
                },
            )
        ]
    )


def test_an_explicit_workflow_ref_is_kept_instead_of_the_workflow_name() -> None:
    given(Run, []).when_creating(lambda: new_run(workflow_ref="builtin:echo")).then(
        [("run.created", {"workflow_name": "echo", "workflow_ref": "builtin:echo"})]
    )


def test_a_new_run_is_not_paused_bound_or_at_any_node() -> None:
    run = given(Run, []).when_creating(new_run).then([("run.created", {})])
    assert (run.paused, run.origin_session_id, run.execution_mode) == (False, None, None)
    assert (run.current_node, run.current_attempt_id, run.waiting_on) == (None, None, None)
    assert (run.presentation_instructions, run.follow_up_count, run.finished_at) == (None, 0, None)


def test_a_run_created_waiting_has_a_finished_at_time() -> None:
    run = (
        given(Run, [])
        .when_creating(lambda: new_run(status="waiting"))
        .then([("run.created", {"status": "waiting"})])
    )
    assert run.finished_at == NOW


def test_a_continuation_child_inherits_the_root_and_the_restart_number() -> None:
    restarted = new_run("x1", parent=new_run("r1"), lineage_kind="restart")
    given(Run, []).when_creating(
        lambda: new_run("c2", parent=restarted, lineage_kind="continuation")
    ).then(
        [
            (
                "run.created",
                {
                    "parent_run_id": "x1",
                    "root_run_id": "r1",
                    "lineage_kind": "continuation",
                    "restart_number": 1,
                    "parent_terminal_fingerprint": None,
                },
            )
        ]
    )


def test_a_restart_child_counts_one_more_restart_and_keeps_the_parent_fingerprint() -> None:
    parent = new_run("r1")
    given(Run, []).when_creating(
        lambda: new_run(
            "restart-1",
            status="queued",
            parent=parent,
            lineage_kind="restart",
            parent_terminal_fingerprint=F7_FINGERPRINT,
        )
    ).then(
        [
            (
                "run.created",
                {
                    "status": "queued",
                    "parent_run_id": "r1",
                    "root_run_id": "r1",
                    "lineage_kind": "restart",
                    "restart_number": 1,
                    "parent_terminal_fingerprint": F7_FINGERPRINT,
                },
            )
        ]
    )


@pytest.mark.parametrize("workflow_name", ["", "   ", None, 7])
def test_a_run_without_a_workflow_name_is_rejected(workflow_name: object) -> None:
    given(Run, []).when_creating(lambda: new_run(workflow_name=workflow_name)).then_raises(
        InvalidWorkflowNameError, "Workflow name must be a non-empty string"
    )


def test_a_workflow_ref_that_is_not_text_is_rejected() -> None:
    given(Run, []).when_creating(lambda: new_run(workflow_ref=7)).then_raises(
        InvalidRunFieldError, "Workflow run workflow_ref must be a string or None"
    )


def test_a_title_that_is_not_text_is_rejected() -> None:
    given(Run, []).when_creating(lambda: new_run(title=["a"])).then_raises(
        InvalidRunFieldError, "Workflow run title must be a string or None"
    )


def test_an_input_that_is_not_plain_json_is_rejected() -> None:
    given(Run, []).when_creating(lambda: new_run(input={"tags": {"a", "b"}})).then_raises(
        NotPlainJsonError,
        "Only plain objects can be stored as canonical JSON (input.tags is a set)",
    )


def test_an_input_with_a_non_finite_number_is_rejected() -> None:
    given(Run, []).when_creating(lambda: new_run(input={"score": float("nan")})).then_raises(
        NonFiniteJsonNumberError, "JSON numbers must be finite (input.score is nan)"
    )


# -- origin session -------------------------------------------------------------------------


def test_binding_records_the_origin_session_and_execution_mode() -> None:
    run = (
        given(Run, history())
        .when(bound("session-1", "headless"))
        .then(
            [
                (
                    "run.session-bound",
                    {
                        "session_id": "session-1",
                        "execution_mode": "headless",
                        "run_id": "run-1",
                        "actor": HOST_JSON,
                    },
                )
            ]
        )
    )
    assert (run.origin_session_id, run.execution_mode) == ("session-1", "headless")


def test_the_first_session_binding_wins() -> None:
    run = given(Run, history(bound("session-1"))).when(bound("session-2", "headless")).then([])
    assert (run.origin_session_id, run.execution_mode) == ("session-1", "interactive")


def test_binding_the_same_session_again_adds_nothing() -> None:
    given(Run, history(bound("session-1"))).when(bound("session-1")).then([])


@pytest.mark.parametrize("session_id", ["", "  ", None, 5])
def test_a_binding_without_a_session_id_is_rejected(session_id: Any) -> None:
    given(Run, history()).when(bound(session_id)).then_raises(
        InvalidSessionIdError, "Workflow Pi session ID must be a non-empty string"
    )


def test_a_binding_with_an_unknown_execution_mode_is_rejected() -> None:
    given(Run, history()).when(bound("session-1", "batch")).then_raises(
        InvalidExecutionModeError, "Workflow execution mode must be interactive or headless"
    )


# -- progress (§3.4) ------------------------------------------------------------------------


def test_running_run_shows_its_current_node_and_waits_on_nothing() -> None:
    run = (
        given(Run, history())
        .when(progressed("running", node="work", attempt="attempt-1", waiting_on="other"))
        .then(
            [
                (
                    "run.progressed",
                    {
                        "status": "running",
                        "current_node": "work",
                        "current_attempt_id": "attempt-1",
                        "waiting_on": None,
                        "status_detail": None,
                    },
                )
            ]
        )
    )
    assert (run.current_node, run.current_attempt_id, run.waiting_on) == ("work", "attempt-1", None)


def test_waiting_run_shows_no_current_node_and_waits_on_it() -> None:
    run = (
        given(Run, history())
        .when(progressed("waiting", node="second", attempt="attempt-2"))
        .then(
            [
                (
                    "run.progressed",
                    {
                        "status": "waiting",
                        "current_node": None,
                        "current_attempt_id": "attempt-2",
                        "waiting_on": "second",
                    },
                )
            ]
        )
    )
    assert (run.current_node, run.current_attempt_id, run.waiting_on) == (
        None,
        "attempt-2",
        "second",
    )


def test_waiting_run_without_an_active_attempt_waits_on_the_given_last_step() -> None:
    given(Run, history()).when(progressed("waiting", waiting_on="approval")).then(
        [
            (
                "run.progressed",
                {"current_node": None, "current_attempt_id": None, "waiting_on": "approval"},
            )
        ]
    )


def test_progress_records_the_status_detail() -> None:
    run = (
        given(Run, history())
        .when(progressed("waiting", node="ask", detail="waiting for origin Pi session"))
        .then([("run.progressed", {"status_detail": "waiting for origin Pi session"})])
    )
    assert run.status_detail == "waiting for origin Pi session"


def test_a_waiting_run_has_a_finished_at_time() -> None:
    run = (
        given(Run, history())
        .when(progressed("waiting", node="ask", now=LATER))
        .then([("run.progressed", {"timestamp": LATER})])
    )
    assert run.finished_at == LATER


def test_a_run_that_runs_again_after_waiting_has_no_finished_at_time() -> None:
    run = (
        given(Run, history(progressed("waiting", node="ask")))
        .when(progressed("running", node="next", now=LATER))
        .then([("run.progressed", {"status": "running"})])
    )
    assert run.finished_at is None


def test_a_queued_restart_child_starts_with_running_progress() -> None:
    run = (
        given(Run, history(status="queued"))
        .when(progressed("running", node="first"))
        .then([("run.progressed", {"status": "running", "current_node": "first"})])
    )
    assert run.status == "running"


@pytest.mark.parametrize("status", ["completed", "queued", "failed", "paused", None])
def test_progress_to_a_status_other_than_running_or_waiting_is_rejected(status: Any) -> None:
    given(Run, history()).when(progressed(status)).then_raises(
        InvalidRunStatusError, f"Workflow run status {status} is not one of: running, waiting"
    )


def test_progress_of_an_ended_run_is_rejected() -> None:
    given(Run, history(finished("completed"))).when(progressed("running")).then_raises(
        RunAlreadyEndedError, "Workflow run run-1 already ended with status completed"
    )


@pytest.mark.parametrize("field", ["current_node", "current_attempt_id", "waiting_on"])
def test_progress_with_a_node_field_that_is_not_text_is_rejected(field: str) -> None:
    def command(run: Run) -> None:
        fields: dict[str, Any] = {
            "current_node": None,
            "current_attempt_id": None,
            "waiting_on": None,
            field: 5,
        }
        run.record_progress(status="waiting", status_detail=None, actor=HOST, now=NOW, **fields)

    given(Run, history()).when(command).then_raises(
        InvalidRunFieldError, f"Workflow run {field} must be a string or None"
    )


# -- pause and resume -----------------------------------------------------------------------


def test_pausing_sets_paused_and_the_status_detail() -> None:
    run = (
        given(Run, history())
        .when(paused("paused"))
        .then([("run.paused", {"status_detail": "paused", "run_id": "run-1"})])
    )
    assert (run.paused, run.status_detail) == (True, "paused")


def test_pausing_a_paused_run_with_the_same_detail_adds_nothing() -> None:
    given(Run, history(paused("paused"))).when(paused("paused")).then([])


def test_pausing_a_paused_run_with_a_new_detail_records_it() -> None:
    given(Run, history(paused("paused"))).when(paused("operator break")).then(
        [("run.paused", {"status_detail": "operator break"})]
    )


def test_pausing_an_ended_run_is_rejected() -> None:
    given(Run, history(finished("failed"))).when(paused()).then_raises(
        RunAlreadyEndedError, "Workflow run run-1 already ended with status failed"
    )


def test_resuming_clears_paused_and_the_status_detail() -> None:
    run = (
        given(Run, history(paused("paused")))
        .when(lambda run: run.resume(actor=HOST, now=LATER))
        .then([("run.resumed", {"timestamp": LATER})])
    )
    assert (run.paused, run.status_detail) == (False, None)


def test_resuming_a_run_that_is_not_paused_adds_nothing() -> None:
    given(Run, history()).when(lambda run: run.resume(actor=HOST, now=NOW)).then([])


def test_resuming_an_ended_run_is_rejected() -> None:
    given(Run, history(paused(), finished("cancelled"))).when(
        lambda run: run.resume(actor=HOST, now=NOW)
    ).then_raises(RunAlreadyEndedError, "Workflow run run-1 already ended with status cancelled")


# -- presentation instructions (§5.6) -------------------------------------------------------


def test_presentation_instructions_are_stored() -> None:
    run = (
        given(Run, history())
        .when(instructed("Summarise briefly."))
        .then([("run.presentation-instructions-set", {"instructions": "Summarise briefly."})])
    )
    assert run.effective_presentation_instructions == "Summarise briefly."


@pytest.mark.parametrize("instructions", ["", "   \n", None, 42])
def test_empty_presentation_instructions_are_rejected(instructions: object) -> None:
    given(Run, history()).when(instructed(instructions)).then_raises(
        EmptyPresentationInstructionsError, "Presentation instructions must not be empty"
    )


def test_the_same_presentation_instructions_again_are_adopted() -> None:
    given(Run, history(instructed("Summarise briefly."))).when(
        instructed("Summarise briefly.")
    ).then([])


def test_different_presentation_instructions_are_rejected() -> None:
    given(Run, history(instructed("Summarise briefly."))).when(
        instructed("Write a poem.")
    ).then_raises(
        PresentationInstructionsChangedError,
        "Workflow presentation instructions changed within one run",
    )


def test_a_run_without_presentation_instructions_presents_with_the_default() -> None:
    run = given(Run, history()).when(lambda _: None).then([])
    assert run.effective_presentation_instructions == DEFAULT_INSTRUCTIONS


# -- follow-up slots ------------------------------------------------------------------------


def test_the_first_accepted_follow_up_gets_order_one() -> None:
    outcome = given(Run, history(bound())).when(
        lambda run: run.accept_follow_up("follow-up-a", actor=HOST, now=NOW)
    )
    run = outcome.then([("run.follow-up-accepted", {"follow_up_id": "follow-up-a", "order": 1})])
    assert outcome.result == 1
    assert run.follow_up_count == 1


def test_accepted_follow_ups_are_numbered_in_sequence() -> None:
    def accepted(follow_up_id: str) -> RunCommand:
        return lambda run: run.accept_follow_up(follow_up_id, actor=HOST, now=NOW)

    outcome = given(Run, history(accepted("follow-up-a"))).when(accepted("follow-up-b"))
    outcome.then([("run.follow-up-accepted", {"follow_up_id": "follow-up-b", "order": 2})])
    assert outcome.result == 2


@pytest.mark.parametrize("status", ["running", "waiting"])
def test_a_running_or_waiting_run_accepts_changes(status: str) -> None:
    given(Run, history(status=status)).when(lambda run: run.check_accepts_changes()).then([])


@pytest.mark.parametrize(
    ("commands", "status"),
    [
        ((), "queued"),
        ((finished("completed"),), "completed"),
        ((finished("failed"),), "failed"),
        ((finished("timed_out"),), "timed_out"),
        ((finished("cancelled"),), "cancelled"),
    ],
)
def test_a_run_that_is_not_running_or_waiting_accepts_no_changes(
    commands: tuple[RunCommand, ...], status: str
) -> None:
    create_status = "queued" if status == "queued" else "running"
    given(Run, history(*commands, status=create_status)).when(
        lambda run: run.check_accepts_changes()
    ).then_raises(
        RunNotAcceptingChangesError,
        f"Workflow run run-1 does not accept changes with status {status}",
    )


# -- finishing ------------------------------------------------------------------------------


def test_finishing_records_the_status_output_error_and_detail() -> None:
    run = (
        given(Run, history())
        .when(
            finished(
                "failed",
                final_output={"partial": True},
                error="boom",
                detail="validation failed",
                terminal_message_id="workflow-message-x",
            )
        )
        .then(
            [
                (
                    "run.finished",
                    {
                        "status": "failed",
                        "final_output": {"partial": True},
                        "error": "boom",
                        "status_detail": "validation failed",
                        "interrupted": False,
                        "terminal_message_id": "workflow-message-x",
                        "timestamp": LATER,
                    },
                )
            ]
        )
    )
    assert (run.status, run.final_output, run.error, run.status_detail) == (
        "failed",
        {"partial": True},
        "boom",
        "validation failed",
    )
    assert (run.finished_at, run.terminal_message_id) == (LATER, "workflow-message-x")


def test_finishing_clears_the_current_node_attempt_waiting_on_and_paused() -> None:
    run = (
        given(Run, history(progressed("waiting", node="ask", attempt="attempt-1"), paused()))
        .when(finished("completed"))
        .then([("run.finished", {"status": "completed"})])
    )
    assert (run.current_node, run.current_attempt_id, run.waiting_on, run.paused) == (
        None,
        None,
        None,
        False,
    )


def test_finishing_a_running_run_clears_its_current_node() -> None:
    run = (
        given(Run, history(progressed("running", node="work", attempt="attempt-1")))
        .when(finished("timed_out"))
        .then([("run.finished", {"status": "timed_out"})])
    )
    assert (run.current_node, run.current_attempt_id) == (None, None)


def test_an_interrupted_run_records_that_its_host_stopped() -> None:
    def interrupted(run: Run) -> None:
        run.finish(
            status="failed",
            final_output=None,
            error="Workflow host stopped before the run finished",
            status_detail=None,
            interrupted=True,
            terminal_message_id=None,
            actor=HOST,
            now=LATER,
        )

    given(Run, history()).when(interrupted).then(
        [
            (
                "run.finished",
                {
                    "status": "failed",
                    "error": "Workflow host stopped before the run finished",
                    "interrupted": True,
                    "terminal_message_id": None,
                },
            )
        ]
    )


def test_the_terminal_fingerprint_matches_upstream_golden_f7() -> None:
    run = (
        given(Run, history(workflow_ref="builtin:echo", input={}))
        .when(finished("failed", error="boom"))
        .then([("run.finished", {"terminal_fingerprint": F7_FINGERPRINT})])
    )
    assert run.terminal_fingerprint == F7_FINGERPRINT


def test_the_fingerprint_depends_only_on_ref_input_status_output_error_and_reason() -> None:
    first = new_run("run-1", workflow_ref="builtin:echo", input={}, title="One")
    second = new_run("run-2", workflow_name="other", workflow_ref="builtin:echo", input={})
    args = ("failed", None, "boom", None)
    assert first.fingerprint_for(*args) == second.fingerprint_for(*args) == F7_FINGERPRINT
    assert first.fingerprint_for("failed", None, "boom", "detail") != F7_FINGERPRINT
    assert first.fingerprint_for("timed_out", None, "boom", None) != F7_FINGERPRINT


@pytest.mark.parametrize("status", ["completed", "failed", "timed_out", "cancelled"])
def test_a_finish_status_must_be_terminal(status: str) -> None:
    assert Run.check_finish_status(status) == status


@pytest.mark.parametrize("status", ["running", "waiting", "queued", "done", None])
def test_a_finish_status_that_is_not_terminal_is_rejected(status: object) -> None:
    with pytest.raises(InvalidRunStatusError) as raised:
        Run.check_finish_status(status)
    assert str(raised.value) == (
        f"Workflow run status {status} is not one of: completed, failed, timed_out, cancelled"
    )


def test_a_run_that_has_not_ended_passes_the_not_ended_check() -> None:
    run = (
        given(Run, history(progressed("waiting", node="ask")))
        .when(lambda run: run.check_not_ended())
        .then([])
    )
    assert run.has_ended is False


@pytest.mark.parametrize("status", ["completed", "failed", "timed_out", "cancelled"])
def test_an_ended_run_fails_the_not_ended_check(status: TerminalStatus) -> None:
    given(Run, history(finished(status))).when(lambda run: run.check_not_ended()).then_raises(
        RunAlreadyEndedError, f"Workflow run run-1 already ended with status {status}"
    )


# -- terminal presentation (§5.6) -----------------------------------------------------------


@pytest.mark.parametrize(
    ("commands", "presents"),
    [
        ((bound("session-1", "interactive"),), True),
        ((bound("session-1", "headless"),), False),
        ((), False),
    ],
)
def test_only_an_interactive_run_with_an_origin_session_presents_a_terminal_message(
    commands: tuple[RunCommand, ...], presents: bool
) -> None:
    run = given(Run, history(*commands)).when(lambda _: None).then([])
    assert run.presents_terminal_message is presents


def test_terminal_facts_list_only_ended_ancestors_oldest_first() -> None:
    root = ended_run("root-run", "failed", error="first boom")
    waiting_parent = new_run("middle", parent=root, lineage_kind="continuation")
    run = new_run("run-1", parent=waiting_parent, lineage_kind="continuation", workflow_ref="r")
    finished("completed", final_output={"reply": "done"}, detail="all good")(run)
    assert run.terminal_facts([root, waiting_parent]) == {
        "schema": "pi-workflows.terminal-result.v1",
        "runId": "run-1",
        "workflowName": "echo",
        "workflowRef": "r",
        "input": {"task": "reply"},
        "status": "completed",
        "finalOutput": {"reply": "done"},
        "error": None,
        "reason": "all good",
        "restartNumber": 0,
        "earlierOutcomes": [
            {
                "runId": "root-run",
                "status": "failed",
                "reason": None,
                "finalOutput": None,
                "error": "first boom",
            }
        ],
    }


# -- restart rules 2-4 (§3.8) ---------------------------------------------------------------


def test_an_ended_interactive_run_of_the_session_is_restartable() -> None:
    given(Run, history(bound("session-1"), finished("failed"))).when(
        lambda run: run.check_restartable_by("session-1")
    ).then([])


@pytest.mark.parametrize(
    "commands",
    [
        pytest.param((bound("session-1"), finished("failed")), id="another-session"),
        pytest.param((bound("session-2", "headless"), finished("failed")), id="headless"),
        pytest.param((finished("failed"),), id="unbound"),
    ],
)
def test_a_run_is_restartable_only_by_its_interactive_origin_session(
    commands: tuple[RunCommand, ...],
) -> None:
    given(Run, history(*commands)).when(
        lambda run: run.check_restartable_by("session-2")
    ).then_raises(RunOfAnotherSessionError, "Workflow run belongs to another Pi session")


def test_an_explicitly_cancelled_run_cannot_be_restarted() -> None:
    given(Run, history(bound("session-1"), finished("cancelled"))).when(
        lambda run: run.check_restartable_by("session-1")
    ).then_raises(CancelledRunRestartError, "An explicitly cancelled workflow cannot be restarted")


def test_a_run_after_three_restarts_cannot_be_restarted() -> None:
    second = restart_chain(2)
    third = history(
        bound("session-1"),
        finished("failed"),
        run_id="restart-3",
        parent=second,
        lineage_kind="restart",
    )
    given(Run, third).when(lambda run: run.check_restartable_by("session-1")).then_raises(
        RestartLimitError, "Workflow restart limit reached (3 restarts)"
    )


def test_a_run_after_two_restarts_can_be_restarted_once_more() -> None:
    first = restart_chain(1)
    given(
        Run, history(bound("session-1"), finished("failed"), parent=first, lineage_kind="restart")
    ).when(lambda run: run.check_restartable_by("session-1")).then([])


def test_the_session_rule_is_checked_before_the_cancelled_rule() -> None:
    given(Run, history(bound("session-1"), finished("cancelled"))).when(
        lambda run: run.check_restartable_by("session-2")
    ).then_raises(RunOfAnotherSessionError, "Workflow run belongs to another Pi session")


def test_the_cancelled_rule_is_checked_before_the_restart_limit() -> None:
    second = restart_chain(2)
    given(
        Run,
        history(bound("session-1"), finished("cancelled"), parent=second, lineage_kind="restart"),
    ).when(lambda run: run.check_restartable_by("session-1")).then_raises(
        CancelledRunRestartError, "An explicitly cancelled workflow cannot be restarted"
    )


def test_recording_the_restart_child_remembers_it() -> None:
    run = (
        given(Run, history(bound("session-1"), finished("failed")))
        .when(
            lambda run: run.record_restart_child(
                "restart-abc",
                workflow_message_id="workflow-message-t",
                workflow_turn_id="turn-1",
                actor=Actor("session", "session-1"),
                now=LATER,
            )
        )
        .then(
            [
                (
                    "run.restart-child-created",
                    {
                        "child_run_id": "restart-abc",
                        "workflow_message_id": "workflow-message-t",
                        "workflow_turn_id": "turn-1",
                        "actor": {"type": "session", "id": "session-1"},
                    },
                )
            ]
        )
    )
    assert run.restart_child_id == "restart-abc"


# -- record ---------------------------------------------------------------------------------


def test_the_run_record_shows_the_rebuilt_state_and_its_times() -> None:
    run = (
        given(Run, history(bound("session-1"), paused("hold")))
        .when(finished("completed", final_output={"reply": "done"}))
        .then([("run.finished", {})])
    )
    record = run.to_record()
    assert record.model_dump() == {
        "run_id": "run-1",
        "workflow_name": "echo",
        "workflow_ref": "echo",
        "title": None,
        "status": "completed",
        "paused": False,
        "status_detail": None,
        "input": {"task": "reply"},
        "final_output": {"reply": "done"},
        "error": None,
        "origin_session_id": "session-1",
        "execution_mode": "interactive",
        "parent_run_id": None,
        "root_run_id": "run-1",
        "lineage_kind": None,
        "restart_number": 0,
        "parent_terminal_fingerprint": None,
        "current_node": None,
        "current_attempt_id": None,
        "waiting_on": None,
        "presentation_instructions": None,
        "created_at": NOW,
        "updated_at": LATER,
        "finished_at": LATER,
        "human_decision": None,
        "updates": [],
    }
