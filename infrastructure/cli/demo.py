"""``runledger demo``: a narrated scenario through every command, then one run's event log.

The story: a code-review run waits for approval, continues in a continuation child, collects
follow-ups, fails (cancelling them), presents its failure to the Pi session, is restarted, and
the restart succeeds and delivers its follow-up; a second follow-up of the restart is held until
the root run closes. After the log, the read models show what the projections made of it all.
Ids carry a fresh token per invocation, so the demo can be re-run against a store that already
holds an earlier one.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from rich import box
from rich.console import Console
from rich.padding import Padding
from rich.table import Table
from rich.text import Text

from runledger.domain.canonical import canonical_json
from runledger.domain.errors import WorkflowError
from runledger.domain.ids import follow_up_message_id
from runledger.domain.records import (
    FollowUpQueue,
    FollowUpRecord,
    LoggedEvent,
    ProjectionStatus,
    RunRecord,
    SnapshotRequired,
    TerminalData,
    ViewerDelta,
    WorkflowMessageRecord,
)
from runledger.domain.values import TERMINAL_STATUSES, Actor
from runledger.infrastructure.store import WorkflowStore

WORKFLOW_NAME: Final = "code-review"
WORKFLOW_REF: Final = "code-review@1.4.0"
REVIEW_INPUT: Final = {"repository": "acme/payments-api", "pull_request": 42}
TEST_FAILURE: Final = "3 of 120 tests failed (test_refunds.py)"
SUMMARY_WIDTH: Final = 60
REVIEW_SETTINGS_POLICY: Final = {
    "rules": [
        {"path": "/strictness", "permissions": {"human": ["read", "replace"], "session": ["read"]}},
        {"path": "/notes", "permissions": {"human": ["read", "add"], "session": ["read", "add"]}},
    ]
}
_LONG_ID: Final = re.compile(
    r"^(follow-up-|workflow-message-|workflow-turn-|restart-)([0-9a-f]{12,})$"
)


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
        token = token or secrets.token_hex(3)
        return cls(
            token=token,
            session=f"pi-{token}",
            stranger_session=f"pi-other-{token}",
            review_run=f"review-{token}",
            continuation_run=f"review-{token}-c1",
        )


@dataclass(frozen=True)
class DemoResult:
    """What the demo created, for callers that want to look further."""

    ids: DemoIds
    restart_run: str
    logged_run: str
    held_follow_up: str
    """The restart's follow-up left pending, which the session outbox releases last."""


class Narrator:
    """Prints the story: numbered section headings and indented steps."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.sections = 0

    def section(self, title: str) -> None:
        self.sections += 1
        self.console.print()
        self.console.rule(Text(f"{self.sections}. {title}", style="bold"), align="left")

    def step(self, text: str) -> None:
        self.console.print(Padding(Text(text), (0, 0, 0, 2), expand=False))

    def rejected(self, error: WorkflowError) -> None:
        line = Text.assemble("rejected ", (f"[{error.code}] ", "dim"), (error.message, "red"))
        self.console.print(Padding(line, (0, 0, 0, 4), expand=False))


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
        self.bound_run()
        self.continuation_child()
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
        run = self.store.create_run(
            run_id,
            workflow_name=WORKFLOW_NAME,
            workflow_ref=WORKFLOW_REF,
            title="Review PR #42",
            input=REVIEW_INPUT,
        )
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
            waiting_on="approve-plan",
            status_detail="Waiting for a reviewer to approve the plan",
        )
        self.say.step(f"{run.status} on {run.waiting_on}: {run.status_detail}")

    def continuation_child(self) -> None:
        self.say.section("A continuation child")
        run_id = self.ids.continuation_run
        run = self.store.create_run(
            run_id,
            workflow_name=WORKFLOW_NAME,
            workflow_ref=WORKFLOW_REF,
            title="Review PR #42 (approved plan)",
            input=REVIEW_INPUT,
            parent_run_id=self.ids.review_run,
        )
        self.say.step(
            f"created {run.run_id}: {run.lineage_kind} of {run.parent_run_id}, "
            f"root {run.root_run_id}"
        )
        self.store.bind_origin_session(run_id, self.ids.session)
        run = self.store.record_progress(
            run_id, status="running", current_node="test", current_attempt_id="test-1"
        )
        self.say.step(f"bound to {run.origin_session_id}; {run.status} at node {run.current_node}")
        for scope in self.store.settings_scopes(run_id):
            self.say.step(
                f"settings scope {scope.scope_id} moved here with the run: "
                f"change {scope.change_number}, {canonical_json(scope.settings)}"
            )

    def review_settings(self, run_id: str) -> None:
        """A settings scope, a human change and a session change the policy refuses."""
        scope = self.store.ensure_settings_scope(
            run_id,
            settings={"strictness": "normal", "notes": []},
            policy=REVIEW_SETTINGS_POLICY,
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
            run_id,
            request_id=f"session-{self.ids.token}-1",
            actor=self.session_actor,
            source="pi-session",
            prompt="Also check the migration guide for breaking changes.",
        )
        self.queue(
            run_id,
            request_id=f"ci-{self.ids.token}-flaky",
            actor=self.controller,
            source="ci",
            prompt="Re-run the flaky refund tests before reporting.",
        )
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
        unwanted = self.queue(
            run_id,
            request_id=f"session-{self.ids.token}-2",
            actor=self.session_actor,
            source="pi-session",
            prompt="Translate the review summary into French.",
        )
        removed = self.store.remove_follow_up(
            run_id, unwanted.follow_up_id, actor=Actor("human", "alice"), source="viewer"
        )
        self.say.step(f"human:alice removed #{removed.order}: {removed.state} ({removed.reason})")
        self.queue(
            self.ids.review_run,
            request_id=f"ci-{self.ids.token}-comment",
            actor=self.controller,
            source="ci",
            prompt="Post the review summary as a PR comment.",
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
            run_id,
            request_id=f"session-{self.ids.token}-3",
            actor=self.session_actor,
            source="pi-session",
            prompt="List the files you changed when you are done.",
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
            request_id=f"ci-{self.ids.token}-issue",
            actor=self.controller,
            source="ci",
            prompt="Open an issue for the flaky refund tests.",
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

    def queue(
        self,
        run_id: str,
        *,
        request_id: str,
        actor: Actor,
        source: str,
        prompt: str,
        where: str = "",
    ) -> FollowUpRecord:
        queued = self.store.queue_follow_up(
            run_id,
            request_id=request_id,
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
        # Run records do not name their terminal message; the run's log does.
        for event in reversed(self.store.event_log(run_id=run_id)):
            if event.wire_name == "run.finished" and event.payload.get("run_id") == run_id:
                message_id = event.payload.get("terminal_message_id")
                if isinstance(message_id, str):
                    return message_id
        msg = f"Run {run_id} has no terminal message"
        raise RuntimeError(msg)

    def follow_up_records(self) -> list[FollowUpRecord]:
        records = (self.store.get_follow_up(i) for i in self.follow_ups)
        return [record for record in records if record is not None]

    def require_run(self, run_id: str) -> RunRecord:
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


def run_demo(store: WorkflowStore, console: Console, *, token: str | None = None) -> DemoResult:
    """Play the scenario on ``store``, print one run's log, then what each read model answers."""
    ids = DemoIds.fresh(token)
    console.print(Text(f"runledger demo on {store.url} (token {ids.token})", style="bold"))
    narrator = Narrator(console)
    result = DemoScenario(store, narrator, ids).run()
    narrator.section(f"Event log of {result.logged_run}")
    events = store.event_log(run_id=result.logged_run)
    console.print(event_log_table(events, width=console.width))
    ReadModelReport(store, narrator, result).show()
    return result


# -- tables: also meant for other commands that show runs and logs -------------------------


def short_id(identifier: str) -> str:
    """A long hashed id cut to its prefix and 8 hex digits (``follow-up-c007b7b1``)."""
    match = _LONG_ID.match(identifier)
    return f"{match.group(1)}{match.group(2)[:8]}" if match else identifier


def short_hex(identifier: str) -> str:
    """Just the 8 hex digits of a long hashed id (``c007b7b1``), for narrow tables."""
    match = _LONG_ID.match(identifier)
    return match.group(2)[:8] if match else identifier


def actor_label(actor_type: str, actor_id: str | None) -> str:
    return actor_type if actor_id is None else f"{actor_type}:{actor_id}"


def clip(text: str, width: int = SUMMARY_WIDTH) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[: width - 3] + "..."


WIDE_LOG: Final = 110
"""From this console width on, the event log gets a summary column; below it, a second line."""


def _table(title: str | None = None, caption: str | None = None) -> Table:
    return Table(
        title=title,
        title_justify="left",
        caption=caption,
        caption_justify="left",
        header_style="bold",
        box=box.SIMPLE_HEAD,
        pad_edge=False,
    )


def run_table(runs: Sequence[RunRecord]) -> Table:
    """Runs with their lineage and status."""
    table = _table("Runs")
    table.add_column("run", overflow="fold")
    table.add_column("lineage")
    table.add_column("status")
    table.add_column("restart #", justify="right")
    table.add_column("session", overflow="fold")
    for run in runs:
        table.add_row(
            short_id(run.run_id),
            run.lineage_kind or "root",
            run.status,
            str(run.restart_number),
            run.origin_session_id or "-",
        )
    return table


def follow_up_table(follow_ups: Sequence[FollowUpRecord]) -> Table:
    """Follow-ups with who queued them and where they ended up."""
    table = _table("Follow-ups")
    table.add_column("run", overflow="fold")
    table.add_column("#", justify="right")
    table.add_column("queued by", overflow="fold")
    table.add_column("state")
    table.add_column("reason", overflow="fold", ratio=1)
    for follow_up in follow_ups:
        table.add_row(
            follow_up.run_id,
            str(follow_up.order),
            actor_label(follow_up.actor.type, follow_up.actor.id),
            follow_up.state,
            follow_up.reason or "",
        )
    return table


def event_log_table(events: Sequence[LoggedEvent], *, width: int = WIDE_LOG) -> Table:
    """Logged events, one row each, with a short summary of the payload.

    On a console narrower than ``WIDE_LOG`` the summary goes on a second line under the
    event's wire name, so 80 columns stay readable.
    """
    wide = width >= WIDE_LOG
    table = _table(caption="times are UTC; aggregate = first 8 hex digits of its UUID")
    table.add_column("pos", justify="right", no_wrap=True)
    table.add_column("time", no_wrap=True)
    longest = max((len(event.wire_name) for event in events), default=5)
    if wide:
        table.add_column("event", no_wrap=True)
    else:
        table.add_column("event / summary", overflow="fold", min_width=longest, ratio=1)
    table.add_column("actor", overflow="fold")
    table.add_column("aggregate", no_wrap=True)
    if wide:
        table.add_column("summary", overflow="fold", ratio=1)
    for event in events:
        summary = Text(summarise(event), style="dim")
        cells = [
            str(event.position),
            event.recorded_at.strftime("%H:%M:%S.%f")[:-3],
            event.wire_name if wide else Text.assemble(event.wire_name, "\n", summary),
            actor_label(event.actor.type, event.actor.id),
            event.aggregate_id[:8],
        ]
        table.add_row(*cells, *([summary] if wide else []))
    return table


def follow_up_queue_table(queue: FollowUpQueue, *, width: int = WIDE_LOG) -> Table:
    """A run's follow-up queue in order; delivery is its latest message's status.

    Below ``WIDE_LOG`` columns ids shrink to their 8 hex digits and the source goes under
    the actor, which leaves the reason room at 80 columns.
    """
    wide = width >= WIDE_LOG
    table = _table(f"Follow-up queue of {short_id(queue.run_id)} (for {queue.origin_session_id})")
    table.add_column("#", justify="right")
    table.add_column("follow-up", no_wrap=True)
    table.add_column("queued by" if wide else "queued by / via", overflow="fold")
    if wide:
        table.add_column("source")
    table.add_column("state")
    table.add_column("delivery")
    table.add_column("reason", overflow="fold", ratio=1, min_width=12)
    for follow_up in queue.follow_ups:
        actor = actor_label(follow_up.actor.type, follow_up.actor.id)
        table.add_row(
            str(follow_up.order),
            short_id(follow_up.follow_up_id) if wide else short_hex(follow_up.follow_up_id),
            *(
                [actor, follow_up.source]
                if wide
                else [Text.assemble(actor, "\n", (f"via {follow_up.source}", "dim"))]
            ),
            follow_up.state,
            follow_up.delivery or "-",
            follow_up.reason or "",
        )
    if not queue.follow_ups:
        table.caption = "no follow-ups"
    return table


def terminal_data_table(data: TerminalData) -> Table:
    """The eight fields a terminal presentation is built from; JSON values compact."""
    table = _table(f"Terminal data of {short_id(data.run_id)}")
    table.add_column("field", no_wrap=True)
    table.add_column("value", overflow="fold", ratio=1)
    null = Text("null", style="dim")
    fields: list[tuple[str, str | Text]] = [
        ("run_id", data.run_id),
        ("status", data.status),
        ("status_detail", null if data.status_detail is None else data.status_detail),
        ("input", canonical_json(data.input)),
        ("final_output", canonical_json(data.final_output)),
        ("error", null if data.error is None else data.error),
        ("presentation_instructions", data.presentation_instructions),
        ("restart_number", str(data.restart_number)),
    ]
    for name, value in fields:
        table.add_row(name, value)
    return table


def viewer_delta_table(deltas: Sequence[ViewerDelta], *, width: int = WIDE_LOG) -> Table:
    """Viewer deltas, one row each: revision, target, op count and the first op paths."""
    paths = 3 if width >= WIDE_LOG else 2
    table = _table()
    table.add_column("rev", justify="right")
    table.add_column("target", no_wrap=True)
    table.add_column("ops", justify="right")
    table.add_column("first op paths", overflow="fold", ratio=1)
    previous = None
    for delta in deltas:
        shown = [str(op.get("path")) for op in delta.patch[:paths]]
        more = " …" if len(delta.patch) > paths else ""
        revision = delta.presentation_revision
        table.add_row(
            "" if revision == previous else str(revision),
            f"{delta.target_type}/{delta.target_key}" if delta.target_key else delta.target_type,
            str(len(delta.patch)),
            ", ".join(shown) + more,
        )
        previous = revision
    return table


def outbox_table(
    messages: Sequence[WorkflowMessageRecord],
    *,
    next_message_id: str | None = None,
    width: int = WIDE_LOG,
) -> Table:
    """A session's workflow messages in session order; the next deliverable is marked.

    Below ``WIDE_LOG`` columns message ids shrink to their 8 hex digits.
    """
    wide = width >= WIDE_LOG
    table = _table()
    table.add_column("order", justify="right")
    table.add_column("kind")
    table.add_column("status")
    table.add_column("Pi entry", overflow="fold")
    table.add_column("message", no_wrap=True)
    table.add_column("")
    for message in messages:
        is_next = message.workflow_message_id == next_message_id
        table.add_row(
            "-" if message.order is None else str(message.order),
            message.kind,
            message.status,
            message.pi_session_entry_id or "-",
            (short_id if wide else short_hex)(message.workflow_message_id),
            Text("<- next", style="bold") if is_next else "",
        )
    return table


def projection_status_table(statuses: Sequence[ProjectionStatus]) -> Table:
    """Each read model's version, log position and lag (and last error, if any)."""
    table = _table()
    table.add_column("projection")
    table.add_column("version", justify="right")
    table.add_column("position", justify="right")
    table.add_column("lag", justify="right")
    failing = any(status.last_error for status in statuses)
    if failing:
        table.add_column("last error", overflow="fold", ratio=1)
    for status in statuses:
        cells = [status.name, str(status.version), str(status.position), str(status.lag)]
        table.add_row(*cells, *([status.last_error or ""] if failing else []))
    return table


def summarise(event: LoggedEvent) -> str:
    """A one-line reading of an event's payload."""
    payload = event.payload
    describe = _SUMMARIES.get(event.wire_name)
    text = describe(payload) if describe is not None else _generic(payload)
    return clip(text)


def _text(payload: dict[str, Any], key: str) -> str:
    value = payload.get(key)
    return "-" if value is None else short_id(str(value))


def _created(p: dict[str, Any]) -> str:
    lineage = p.get("lineage_kind")
    origin = "" if lineage is None else f", {lineage} of {_text(p, 'parent_run_id')}"
    return f"{_text(p, 'workflow_name')} {_text(p, 'status')}{origin}"


def _progressed(p: dict[str, Any]) -> str:
    where = (
        f"on {_text(p, 'waiting_on')}" if p.get("waiting_on") else f"at {_text(p, 'current_node')}"
    )
    detail = f": {p['status_detail']}" if p.get("status_detail") else ""
    return f"{_text(p, 'status')} {where}{detail}"


def _finished(p: dict[str, Any]) -> str:
    if p.get("error") is not None:
        return f"{_text(p, 'status')}: {p['error']}"
    return f"{_text(p, 'status')}: {p.get('final_output')}"


_SUMMARIES: Final[dict[str, Callable[[dict[str, Any]], str]]] = {
    "run.created": _created,
    "run.session-bound": lambda p: f"{_text(p, 'session_id')} ({_text(p, 'execution_mode')})",
    "run.progressed": _progressed,
    "run.paused": lambda p: f"paused: {_text(p, 'status_detail')}",
    "run.presentation-instructions-set": lambda p: _text(p, "instructions"),
    "run.follow-up-accepted": lambda p: f"#{_text(p, 'order')} {_text(p, 'follow_up_id')}",
    "run.finished": _finished,
    "run.restart-child-created": lambda p: f"child {_text(p, 'child_run_id')}",
    "follow-up.queued": lambda p: f"#{_text(p, 'order')} {_text(p, 'source')}: {p.get('prompt')}",
    "follow-up.removed": lambda p: f"by {_text(p, 'source')}: {_text(p, 'reason')}",
    "follow-up.cancelled": lambda p: f"{_text(p, 'status')}: {_text(p, 'reason')}",
    "workflow-message.created": lambda p: f"{_text(p, 'kind')} for {_text(p, 'target_session_id')}",
    "workflow-message.cancelled": lambda p: (
        f"{_text(p, 'kind')} message of {_text(p, 'source_id')}"
    ),
    "workflow-message.sent": lambda p: (
        f"{_text(p, 'kind')} as Pi entry {_text(p, 'pi_session_entry_id')}"
    ),
    "workflow-turn.reserved": lambda p: _text(p, "workflow_turn_id"),
    "workflow-turn.started": lambda p: _text(p, "workflow_turn_id"),
    "workflow-turn.ended": lambda p: (
        f"{_text(p, 'stop_reason')} -> {_text(p, 'response_session_entry_id')}"
    ),
}


def _generic(payload: dict[str, Any]) -> str:
    scalars = (
        f"{key}={short_id(str(value))}"
        for key, value in payload.items()
        if key != "run_id" and isinstance(value, str | int | float | bool)
    )
    return " ".join(scalars)
