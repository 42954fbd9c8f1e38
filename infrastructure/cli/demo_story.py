"""``runledger demo``: a narrated scenario through every command, then one run's event log.

The story: a code-review run gets a settings scope (a human tightens it, the session may not
relax it), waits for a human decision, whose answer continues it in a continuation child that
takes the scope along; the child records its Pi session and applies a managed effect,
collects follow-ups, fails (cancelling them), presents its failure to the Pi session, is
restarted, and the restart succeeds and delivers its follow-up; a second follow-up of the
restart is held until the root run closes. After the log, the read models show what the
projections made of it all.
Ids carry a fresh token per invocation, so the demo can be re-run against a store that already
holds an earlier one. This module decides which commands run and what is said about them;
``render`` decides how it looks.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Final, Literal

from rich.console import Console
from rich.text import Text

from runledger.domain.canonical import canonical_json
from runledger.domain.errors import WorkflowError
from runledger.domain.ids import continuation_run_id_for, decision_id_for, follow_up_message_id
from runledger.domain.records import (
    FollowUpRecord,
    RunRecord,
    SnapshotRequired,
    WorkflowMessageRecord,
)
from runledger.domain.values import TERMINAL_STATUSES, Actor
from runledger.infrastructure.cli.render import (
    Narrator,
    actor_label,
    event_log_table,
    follow_up_queue_table,
    follow_up_table,
    outbox_table,
    projection_status_table,
    run_table,
    short_id,
    terminal_data_table,
    viewer_delta_table,
)
from runledger.infrastructure.store import WorkflowStore

WORKFLOW_NAME: Final = "code-review"
WORKFLOW_REF: Final = "code-review@1.4.0"
REVIEW_INPUT: Final = {"repository": "acme/payments-api", "pull_request": 42}
TEST_FAILURE: Final = "3 of 120 tests failed (test_refunds.py)"
REVIEW_SETTINGS: Final = {"strictness": "normal", "notes": []}
PLAN_DECISION: Final = {"title": "Approve the review plan?", "choices": ["approve", "revise"]}
PLAN_NODE: Final = "approve-plan"
PLAN_ATTEMPT: Final = "approve-plan-1"
TEST_ATTEMPT: Final = "test-1"
REVIEW_SETTINGS_POLICY: Final = {
    "rules": [
        {"path": "/strictness", "permissions": {"human": ["read", "replace"], "session": ["read"]}},
        {"path": "/notes", "permissions": {"human": ["read", "add"], "session": ["read", "add"]}},
    ]
}


@dataclass(frozen=True)
class DemoIds:
    """The ids one demo invocation uses; the token keeps them apart from earlier demos."""

    token: str
    session: str
    stranger_session: str
    review_run: str
    continuation_run: str

    @classmethod
    def fresh(cls, token: str | None = None) -> DemoIds:
        """The ids for a new demo, under ``token`` or a random one."""
        token = token or secrets.token_hex(3)
        review_run = f"review-{token}"
        return cls(
            token=token,
            session=f"pi-{token}",
            stranger_session=f"pi-other-{token}",
            review_run=review_run,
            # The answered plan decision names its continuation child.
            continuation_run=continuation_run_id_for(
                decision_id_for(review_run, PLAN_NODE, PLAN_ATTEMPT)
            ),
        )


@dataclass(frozen=True)
class DemoResult:
    """What the demo created, for callers that want to look further."""

    ids: DemoIds
    restart_run: str
    logged_run: str
    held_follow_up: str
    """The restart's follow-up left pending, which the session outbox releases last."""


class DemoScenario:
    """The scenario, one method per section, each using only the public store API."""

    def __init__(self, store: WorkflowStore, narrator: Narrator, ids: DemoIds) -> None:
        self.store = store
        self.say = narrator
        self.ids = ids
        self.session_actor = Actor("session", ids.session)
        self.controller = Actor("controller", "ci-bot")
        self.follow_ups: list[str] = []
        self.entries = 0

    def run(self) -> DemoResult:
        """Play every section in order and return what it created."""
        self.bound_run()
        self.continuation_child()
        self.recorded_session()
        self.managed_effect()
        self.queued_follow_ups()
        terminal_message = self.failing_run()
        self.terminal_presentation(terminal_message)
        restart = self.restart(terminal_message)
        held = self.successful_run(restart)
        self.root_closes(held)
        return DemoResult(
            ids=self.ids,
            restart_run=restart,
            logged_run=self.ids.continuation_run,
            held_follow_up=held.follow_up_id,
        )

    def bound_run(self) -> None:
        self.say.section("A run bound to a Pi session")
        run_id = self.ids.review_run
        run = self.create_review(run_id, "Review PR #42")
        self.say.step(f"created run {run.run_id} ({run.workflow_ref}): {run.status}")
        run = self.store.bind_origin_session(run_id, self.ids.session)
        self.say.step(f"bound to Pi session {run.origin_session_id} ({run.execution_mode})")
        run = self.store.record_progress(
            run_id, status="running", current_node="lint", current_attempt_id="lint-1"
        )
        self.say.step(f"{run.status} at node {run.current_node} (attempt {run.current_attempt_id})")
        self.review_settings(run_id)
        run = self.store.record_progress(
            run_id,
            status="waiting",
            waiting_on=PLAN_NODE,
            status_detail="Waiting for a reviewer to approve the plan",
        )
        self.say.step(f"{run.status} on {run.waiting_on}: {run.status_detail}")

    def continuation_child(self) -> None:
        self.say.section("A continuation child from a human decision")
        decision = self.store.request_human_decision(
            self.ids.review_run, node_id=PLAN_NODE, attempt_id=PLAN_ATTEMPT, request=PLAN_DECISION
        )
        self.say.step(
            f"decision {short_id(decision.decision_id)} {decision.status}: "
            f"{PLAN_DECISION['title']} ({' or '.join(PLAN_DECISION['choices'])})"
        )
        answer = self.store.answer_human_decision(
            decision.decision_id,
            actor=Actor("human", "reviewer"),
            response={"choice": "approve"},
            submission_id=f"approve-{self.ids.token}",
            continue_run=True,
        )
        self.say.step(
            f"human:reviewer answered approve with continue_run: {answer.outcome}, "
            f"decision {answer.decision.status}"
        )
        run_id = self.ids.continuation_run
        run = self.require_run(run_id)
        self.say.step(
            f"continuation child {run.run_id} ({run.status}): {run.lineage_kind} of "
            f"{run.parent_run_id}, root {run.root_run_id}"
        )
        run = self.store.record_progress(
            run_id, status="running", current_node="test", current_attempt_id=TEST_ATTEMPT
        )
        self.say.step(f"bound to {run.origin_session_id}; {run.status} at node {run.current_node}")
        for scope in self.store.settings_scopes(run_id):
            self.say.step(
                f"settings scope {scope.scope_id} moved here with the run: "
                f"change {scope.change_number}, {canonical_json(scope.settings)}"
            )

    def recorded_session(self) -> None:
        self.say.section("The child records its Pi session")
        run_id = self.ids.continuation_run
        binding = {
            "schema": "pi-workflows.session-binding.v1",
            "runId": run_id,
            "piSessionId": self.ids.session,
            "boundAt": "2026-01-01T00:00:00.000Z",
        }
        segment = self.store.record_session_binding(run_id, binding, attempt_id=TEST_ATTEMPT)
        self.say.step(
            f"segment {short_id(segment.segment_id)} of attempt {segment.attempt_id}: "
            f"{segment.status}"
        )
        entry_seq = self.store.append_session_entry(
            run_id, {"id": "run-tests", "role": "user"}, attempt_id=TEST_ATTEMPT
        )
        self.say.step(f"entry {entry_seq} recorded: the prompt to run the tests")
        batch = [
            {
                "seq": seq,
                "at": "2026-01-01T00:00:01.000Z",
                "type": kind,
                "nodeId": "test",
                "attemptId": TEST_ATTEMPT,
                "payload": {"turn": 1},
            }
            for seq, kind in enumerate(("turn_started", "turn_finished"), start=1)
        ]
        self.store.append_session_events(run_id, batch, attempt_id=TEST_ATTEMPT)
        capture = {
            "schema": "pi-workflows.session-capture.v1",
            "eventSchema": "pi-workflows.session-event.v1",
            "status": "complete",
            "entryCount": entry_seq,
            "eventCount": len(batch),
        }
        segment = self.store.update_session_capture(run_id, capture, attempt_id=TEST_ATTEMPT)
        self.say.step(
            f"a batch of {len(batch)} events, then the capture is {segment.status}: "
            f"{segment.entry_count} entry, {segment.event_count} events, "
            f"integrity {segment.integrity}"
        )

    def managed_effect(self) -> None:
        self.say.section("The child applies a managed effect")
        request = {"check": "ci/tests", "pull_request": 42, "recovery": "idempotent"}
        reserved = self.store.reserve_effect(
            self.ids.continuation_run,
            effect_type="status-check",
            key="pr-42-tests",
            request=request,
        )
        effect = reserved.effect
        self.say.step(
            f"reserved {effect.effect_type} effect {short_id(effect.effect_id)}: "
            f"{reserved.outcome}, attempt {effect.attempt} {effect.status}, "
            f"may apply: {reserved.may_apply}"
        )
        effect = self.store.settle_effect(
            effect.effect_id, attempt=effect.attempt, outcome="applied", result={"state": "pending"}
        )
        self.say.step(
            f"settled attempt {effect.attempt}: {effect.status}, {canonical_json(effect.result)}"
        )

    def review_settings(self, run_id: str) -> None:
        """A settings scope, a human change and a session change the policy refuses."""
        scope = self.store.ensure_settings_scope(
            run_id, settings=REVIEW_SETTINGS, policy=REVIEW_SETTINGS_POLICY
        )
        self.say.step(f"settings scope {scope.scope_id}: {canonical_json(scope.settings)}")
        changed = self.store.change_settings(
            run_id,
            scope.scope_id,
            request_id=f"strict-{self.ids.token}",
            actor=Actor("human", "reviewer"),
            source="interactive-command",
            patch=[{"op": "replace", "path": "/strictness", "value": "strict"}],
            expected_change_number=0,
        )
        self.say.step(
            f"a human changed it (change {changed.change.change_number}): "
            f"{canonical_json(changed.scope.settings)}"
        )
        self.say.step("the session tries to relax it again")
        try:
            self.store.change_settings(
                run_id,
                scope.scope_id,
                request_id=f"relax-{self.ids.token}",
                actor=self.session_actor,
                source="workflow-tool",
                patch=[{"op": "replace", "path": "/strictness", "value": "lenient"}],
            )
        except WorkflowError as error:
            self.say.rejected(error)

    def queued_follow_ups(self) -> None:
        self.say.section("Follow-ups queued against the running child")
        run_id = self.ids.continuation_run
        by_session = self.queue(
            run_id, "session", "1", "Also check the migration guide for breaking changes."
        )
        self.queue(run_id, "ci", "flaky", "Re-run the flaky refund tests before reporting.")
        again = self.store.queue_follow_up(
            run_id,
            request_id=by_session.request_id,
            target_session_id=self.ids.session,
            actor=self.session_actor,
            source="pi-session",
            prompt=by_session.prompt,
        )
        self.say.step(
            f"re-sent request {again.follow_up.request_id}: adopted={again.adopted}, "
            f"still follow-up #{again.follow_up.order} (nothing new recorded)"
        )
        try:
            self.store.queue_follow_up(
                run_id,
                request_id=f"session-{self.ids.token}-stray",
                target_session_id=self.ids.stranger_session,
                actor=Actor("session", self.ids.stranger_session),
                source="pi-session",
                prompt="Please also deploy to staging.",
            )
        except WorkflowError as error:
            self.say.step(f"another session ({self.ids.stranger_session}) tries to queue one:")
            self.say.rejected(error)
        unwanted = self.queue(run_id, "session", "2", "Translate the review summary into French.")
        removed = self.store.remove_follow_up(
            run_id, unwanted.follow_up_id, actor=Actor("human", "alice"), source="viewer"
        )
        self.say.step(f"human:alice removed #{removed.order}: {removed.state} ({removed.reason})")
        self.queue(
            self.ids.review_run,
            "ci",
            "comment",
            "Post the review summary as a PR comment.",
            where=f" on the parent {self.ids.review_run}",
        )

    def failing_run(self) -> str:
        self.say.section("The child fails, cancelling queued follow-ups")
        run_id = self.ids.continuation_run
        run = self.store.finish_run(run_id, status="failed", error=TEST_FAILURE)
        self.say.step(f"{run.run_id} ended {run.status}: {run.error}")
        self.say.console.print(follow_up_table(self.follow_up_records()))
        return self.terminal_message_of(run_id)

    def terminal_presentation(self, terminal_message: str) -> None:
        self.say.section("The failure is presented in the Pi session")
        self.say.step(f"terminal message {short_id(terminal_message)} is pending for the session")
        self.deliver(terminal_message, run_id=self.ids.continuation_run)

    def restart(self, terminal_message: str) -> str:
        self.say.section("The session restarts the failed run")
        receipt = self.store.restart_run(
            self.ids.continuation_run,
            session_id=self.ids.session,
            workflow_message_id=terminal_message,
        )
        child = self.require_run(receipt.run_id)
        self.say.step(
            f"restart child {child.run_id} (restart #{receipt.restart_number}): {child.status}"
        )
        repeated = self.store.restart_run(
            self.ids.continuation_run,
            session_id=self.ids.session,
            workflow_message_id=terminal_message,
        )
        self.say.step(f"asking again adopts it: adopted={repeated.adopted}")
        child = self.store.record_progress(
            receipt.run_id, status="running", current_node="test", current_attempt_id="test-2"
        )
        self.say.step(f"started: {child.status} at node {child.current_node}")
        return receipt.run_id

    def successful_run(self, run_id: str) -> FollowUpRecord:
        self.say.section("The restart succeeds and delivers its follow-up")
        follow_up = self.queue(
            run_id, "session", "3", "List the files you changed when you are done."
        )
        self.deliver(follow_up_message_id(follow_up.follow_up_id), run_id=run_id)
        try:
            self.store.remove_follow_up(
                run_id, follow_up.follow_up_id, actor=Actor("human", "alice"), source="viewer"
            )
        except WorkflowError as error:
            self.say.step("human:alice tries to remove the delivered follow-up:")
            self.say.rejected(error)
        held = self.queue(
            run_id,
            "ci",
            "issue",
            "Open an issue for the flaky refund tests.",
            where=" (not delivered yet)",
        )
        run = self.store.finish_run(
            run_id,
            status="completed",
            final_output={"verdict": "approve", "tests": "120 passed"},
        )
        self.say.step(f"{run.run_id} ended {run.status}: {run.final_output}")
        self.deliver(self.terminal_message_of(run_id), run_id=run_id)
        runs = [self.require_run(i) for i in (self.ids.review_run, self.ids.continuation_run)]
        self.say.console.print(run_table([*runs, run]))
        return held

    def root_closes(self, held: FollowUpRecord) -> None:
        self.say.section("The root run closes, releasing the held follow-up")
        session = self.ids.session
        held_back = describe_next(self.store, session, self.store.next_deliverable(session))
        self.say.step(
            f"follow-up #{held.order} of {short_id(held.run_id)} is pending; "
            f"next deliverable for {session}: {held_back}"
        )
        run = self.store.finish_run(
            self.ids.review_run,
            status="completed",
            final_output={"plan": "approved", "continued_in": self.ids.continuation_run},
        )
        self.say.step(f"{run.run_id} ended {run.status}: its lineage has settled")
        released = describe_next(self.store, session, self.store.next_deliverable(session))
        self.say.step(f"next deliverable for {session}: {released}")

    # -- helpers --------------------------------------------------------------------------

    def create_review(
        self, run_id: str, title: str, *, parent_run_id: str | None = None
    ) -> RunRecord:
        """Create a run of the code-review workflow on the demo's pull request."""
        return self.store.create_run(
            run_id,
            workflow_name=WORKFLOW_NAME,
            workflow_ref=WORKFLOW_REF,
            title=title,
            input=REVIEW_INPUT,
            parent_run_id=parent_run_id,
        )

    def queue(
        self,
        run_id: str,
        by: Literal["session", "ci"],
        request: str,
        prompt: str,
        *,
        where: str = "",
    ) -> FollowUpRecord:
        """Queue a follow-up for the demo's session as it (or as the CI bot), and say so."""
        actor, source = (
            (self.session_actor, "pi-session") if by == "session" else (self.controller, "ci")
        )
        queued = self.store.queue_follow_up(
            run_id,
            request_id=f"{by}-{self.ids.token}-{request}",
            target_session_id=self.ids.session,
            actor=actor,
            source=source,
            prompt=prompt,
        )
        record = queued.follow_up
        self.follow_ups.append(record.follow_up_id)
        self.say.step(
            f"{actor_label(actor.type, actor.id)} queued #{record.order}{where}: {prompt}"
        )
        return record

    def deliver(self, workflow_message_id: str, *, run_id: str) -> None:
        """What the host does once the message is in the session branch: report, then turn."""
        self.entries += 1
        entry = f"entry-{self.ids.token}-{self.entries}"
        (sent,) = self.store.report_branch(
            self.ids.session, [(workflow_message_id, entry)], allowed_ids=[workflow_message_id]
        )
        self.say.step(f"branch report: {sent.kind} message {sent.status} as Pi entry {entry}")
        turn = self.store.start_turn(
            workflow_message_id, run_id=run_id, target_session_id=self.ids.session
        )
        self.say.step(f"model turn {short_id(turn.workflow_turn_id)} {turn.state}")
        self.entries += 1
        turn = self.store.end_turn(
            turn.workflow_turn_id,
            stop_reason="completed",
            response_session_entry_id=f"entry-{self.ids.token}-{self.entries}",
        )
        self.say.step(
            f"model turn {short_id(turn.workflow_turn_id)} {turn.state}: {turn.stop_reason}"
        )

    def terminal_message_of(self, run_id: str) -> str:
        """The id of the terminal message the run's end created."""
        # Run records do not name their terminal message; the run's log does.
        for event in reversed(self.store.event_log(run_id=run_id)):
            if event.wire_name == "run.finished" and event.payload.get("run_id") == run_id:
                message_id = event.payload.get("terminal_message_id")
                if isinstance(message_id, str):
                    return message_id
        msg = f"Run {run_id} has no terminal message"
        raise RuntimeError(msg)

    def follow_up_records(self) -> list[FollowUpRecord]:
        """Every follow-up the scenario queued, as it stands now."""
        records = (self.store.get_follow_up(i) for i in self.follow_ups)
        return [record for record in records if record is not None]

    def require_run(self, run_id: str) -> RunRecord:
        """The run's record; the scenario created it, so it exists."""
        run = self.store.get_run(run_id)
        if run is None:
            msg = f"Run {run_id} vanished"
            raise RuntimeError(msg)
        return run


class ReadModelReport:
    """After the scenario: what each read model answers about it, one section per query."""

    def __init__(self, store: WorkflowStore, narrator: Narrator, result: DemoResult) -> None:
        self.store = store
        self.say = narrator
        self.result = result
        self.console = narrator.console

    def show(self) -> None:
        """One section per read model, then the projections' status."""
        self.follow_up_queues()
        self.terminal_data()
        self.viewer_deltas()
        self.session_outbox()
        self.projection_status()

    def follow_up_queues(self) -> None:
        self.say.section("Read model: follow-up queues")
        ids = self.result.ids
        for run_id in (ids.review_run, ids.continuation_run, self.result.restart_run):
            queue = self.store.follow_up_queue(run_id)
            if queue is None:
                self.say.step(f"{short_id(run_id)}: no queue (the run has no origin session)")
                continue
            self.console.print(follow_up_queue_table(queue, width=self.console.width))

    def terminal_data(self) -> None:
        self.say.section("Read model: terminal data")
        for run_id in (self.result.ids.continuation_run, self.result.restart_run):
            data = self.store.terminal_data(run_id)
            if data is None:
                self.say.step(f"{short_id(run_id)}: no terminal data (the run has not ended)")
                continue
            self.console.print(terminal_data_table(data))

    def viewer_deltas(self) -> None:
        run_id = self.result.logged_run
        self.say.section(f"Read model: viewer deltas of {run_id}")
        fresh = self.store.viewer_deltas(run_id, after_revision=0)
        self.say.step(
            f"current revision {fresh.current_revision}, "
            f"retained from revision {fresh.retained_from_revision}"
        )
        self.say.step(
            f"viewer_deltas(after_revision=0) -> {fresh.kind}: a viewer with no revision yet "
            "loads a snapshot, then follows deltas from the snapshot's revision"
        )
        # Revision 1 is the snapshot a viewer starts from (run.created has no delta).
        cursor = max(1, fresh.retained_from_revision - 1)
        answer = self.store.viewer_deltas(run_id, after_revision=cursor)
        if isinstance(answer, SnapshotRequired):
            self.say.step(f"viewer_deltas(after_revision={cursor}) -> {answer.kind}")
            return
        self.say.step(
            f"viewer_deltas(after_revision={cursor}) -> {answer.kind}: "
            f"{len(answer.deltas)} deltas in revisions {cursor + 1}-{answer.current_revision}"
        )
        self.console.print(viewer_delta_table(answer.deltas, width=self.console.width))

    def session_outbox(self) -> None:
        session = self.result.ids.session
        self.say.section(f"Read model: session outbox of {session}")
        messages = self.store.session_outbox(session)
        following = self.store.next_deliverable(session)
        next_id = None if following is None else following.workflow_message_id
        self.console.print(
            outbox_table(messages, next_message_id=next_id, width=self.console.width)
        )
        self.say.step(f"next deliverable: {describe_next(self.store, session, following)}")

    def projection_status(self) -> None:
        self.say.section("Projection status")
        self.console.print(projection_status_table(self.store.projection_status()))


def describe_next(
    store: WorkflowStore, session_id: str, message: WorkflowMessageRecord | None
) -> str:
    """``next_deliverable``'s answer in words: the message, or why none is eligible."""
    if message is None:
        return f"none eligible ({why_none_eligible(store, session_id)})"
    what = f"{message.kind} message {short_id(message.workflow_message_id)}"
    follow_up = store.get_follow_up(message.source_id) if message.kind == "followUp" else None
    if follow_up is not None:
        what += f" (follow-up #{follow_up.order} of {short_id(follow_up.run_id)})"
    return f"{what}, session order {message.order}"


def why_none_eligible(store: WorkflowStore, session_id: str) -> str:
    """The plainest reason no message of the session may be delivered now."""
    outbox = store.session_outbox(session_id)
    pending = [message for message in outbox if message.status == "pending"]
    if not pending:
        return "no message is pending"
    held_runs = {message.run_id for message in pending if message.kind == "followUp"}
    # A pending follow-up is most often held by another run of its session that has not
    # ended; only runs with a message in the outbox are looked at, enough to name it.
    others = (run_id for run_id in dict.fromkeys(m.run_id for m in outbox) if held_runs)
    for run_id in others:
        run = store.get_run(run_id)
        if run is not None and run_id not in held_runs and run.status not in TERMINAL_STATUSES:
            return (
                f"{run.run_id} is still {run.status}, and a follow-up waits until no other "
                "run of its session is queued, running or waiting"
            )
    return f"{len(pending)} pending, none passes the delivery rules yet"


def run_demo(
    store: WorkflowStore, console: Console, *, url: str, token: str | None = None
) -> DemoResult:
    """Play the scenario on ``store`` (at ``url``), print one run's log, then the read models."""
    ids = DemoIds.fresh(token)
    console.print(Text(f"runledger demo on {url} (token {ids.token})", style="bold"))
    narrator = Narrator(console)
    result = DemoScenario(store, narrator, ids).run()
    narrator.section(f"Event log of {result.logged_run}")
    events = store.event_log(run_id=result.logged_run)
    console.print(event_log_table(events, width=console.width))
    ReadModelReport(store, narrator, result).show()
    return result
