"""The application service: every command and consistent read of the workflow domain.

A command loads what it needs into a unit of work, checks upstream's rules in upstream's
order, and saves every aggregate it changed in one atomic ``save``. Two commands that touch
the same aggregate conflict on its version; the loser reloads and runs again, so nothing
acknowledged is lost and nothing is applied twice.
"""

from __future__ import annotations

import itertools
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application, LRUCache
from eventsourcing.domain import (
    BaseAggregate,
    ImmutableAggregateProtocol,
    MutableAggregateProtocol,
)

from runledger.domain import lineage, outbox, restarts, run_endings, settings_changes
from runledger.domain.cached_aggregates import PrunableRepository
from runledger.domain.effects import (
    Effect,
    check_label,
    check_outcome,
    effect_aggregate_id,
    effect_id_for,
)
from runledger.domain.effects import (
    check_request as check_effect_request,
)
from runledger.domain.errors import (
    CorruptEventError,
    DecisionNotFoundError,
    DecisionRunMissingError,
    InvalidPageError,
    ParentRunMissingError,
    RunArchivedError,
    RunNotFoundError,
    SettingsKeptChangingError,
)
from runledger.domain.follow_ups import (
    FollowUp,
    check_prompt,
    check_request_id,
    check_source,
    follow_up_aggregate_id,
)
from runledger.domain.human_decisions import (
    HumanDecision,
    check_cancel_provenance,
    check_decision_run_id,
    check_flag,
    check_identifier,
    check_request,
    decision_aggregate_id,
    is_decision_id,
)
from runledger.domain.ids import decision_id_for, workflow_message_id_for
from runledger.domain.leases import (
    DEFAULT_LEASE_MS,
    check_authority,
    check_claim,
    check_lease_ms,
    check_owner,
    new_token,
)
from runledger.domain.ports import Command, CommandUnit, Wiring
from runledger.domain.records import (
    DecisionSubmission,
    EffectRecord,
    EffectReservation,
    FollowUpRecord,
    HumanDecisionRecord,
    QueuedFollowUp,
    RestartReceipt,
    RunClaim,
    RunRecord,
    SessionEntryRecord,
    SessionEventRecord,
    SessionSegmentRecord,
    SettingsChange,
    SettingsScopeRecord,
    TurnRecord,
    UpdateRecord,
    WorkflowMessageRecord,
)
from runledger.domain.run_tree_archives import RunTreeArchive
from runledger.domain.runs import (
    Run,
    check_interruption_reason,
    check_run_id,
    run_aggregate_id,
)
from runledger.domain.session_segments import (
    SessionSegment,
    check_attempt_id,
    check_binding,
    check_capture,
    check_entry,
    check_event_batch,
    segment_aggregate_id,
    segment_id_for,
    segments_of_run_key,
)
from runledger.domain.settings_policy import (
    check_expected_change_number,
    check_invocation,
    check_mount_path,
    check_patch,
    check_policy,
)
from runledger.domain.turn_reservations import TurnReservation, check_turn_id, turn_aggregate_id
from runledger.domain.values import (
    HOST,
    INTERRUPTED_REASON,
    SYSTEM,
    Actor,
    ExecutionMode,
    HostMessageKind,
    JsonValue,
    ProgressStatus,
    RecoveryVerdict,
    StartStatus,
    StopReason,
    TerminalStatus,
    is_count,
    looked_up_id,
)
from runledger.domain.workflow_messages import (
    WorkflowMessage,
    branch_entries,
    check_host_message,
    message_aggregate_id,
)

Clock = Callable[[], datetime]
A = TypeVar("A", bound=BaseAggregate[UUID])
E = TypeVar("E")
T = TypeVar("T")


def utc_now() -> datetime:
    return datetime.now(UTC)


def of_kind(aggregate: BaseAggregate[UUID], cls: type[A]) -> A:
    """The aggregate, which must be a ``cls``: ids are derived per kind of aggregate, so
    another kind under this id means the stored rows were changed; answering "not found"
    would hide them."""
    if not isinstance(aggregate, cls):
        raise CorruptEventError(
            f"it replays to a {type(aggregate).__name__}, not a {cls.__name__}",
            wire_name=None,
            aggregate_id=aggregate.id,
            version=aggregate.version,
        )
    return aggregate


class WorkflowRuns(Application[UUID]):
    """Runs, their lineage, follow-ups and the workflow-message outbox, event-sourced."""

    name = "runledger"
    snapshotting_intervals: ClassVar[
        dict[type[MutableAggregateProtocol[Any]] | type[ImmutableAggregateProtocol[Any]], int]
    ] = {Run: 100, SessionSegment: 100}

    def __init__(
        self,
        wiring: Wiring,
        *,
        clock: Clock = utc_now,
        env: dict[str, str] | None = None,
        allow_host_session_recording: bool = False,
    ) -> None:
        """``wiring`` gives the library's persistence parts and how a command commits
        (``infrastructure.commits``). ``allow_host_session_recording`` lets session
        recording skip the run's write authority (upstream 0.16.2: the host records after
        the worker's lease ended)."""
        self.wiring = wiring
        self.allow_host_session_recording = allow_host_session_recording
        self.clock = clock
        settings = {"AGGREGATE_CACHE_MAXSIZE": "10000"}
        settings.update(env or {})
        super().__init__(env=settings)
        self.commits = wiring.commits(self, self.load, self.now)

    # -- wiring: persistence comes from the composition root, not from the environment ----

    def construct_repository(self) -> PrunableRepository:
        base = super().construct_repository()
        return PrunableRepository(
            event_store=base.event_store,
            snapshot_store=base.snapshot_store,
            cache_maxsize=base.cache.maxsize if isinstance(base.cache, LRUCache) else None,
            fastforward=base.fastforward,
            fastforward_skipping=base.fastforward_skipping,
            deepcopy_from_cache=base.deepcopy_from_cache,
        )

    def construct_mapper(self) -> Any:
        return self.wiring.mapper()

    def construct_recorder(self) -> Any:
        return self.wiring.recorder()

    def construct_snapshot_store(self) -> Any:
        return self.wiring.snapshot_store(self.mapper)

    def load(self, cls: type[A], aggregate_id: UUID, *, version: int | None = None) -> A | None:
        """The aggregate (as of ``version``, else its last), or None when there is none."""
        try:
            aggregate: BaseAggregate[UUID] = self.repository.get(aggregate_id, version=version)
        except AggregateNotFoundError:
            return None
        return of_kind(aggregate, cls)

    def now(self) -> datetime:
        moment = self.clock()
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)

    def execute(
        self,
        command: Command[T],
        *,
        attempts: int | None = None,
        exhausted: Callable[[], Exception] | None = None,
    ) -> T:
        """Run ``command`` and commit what it changed (``domain.ports.Commits``); a run
        not found because its tree was pruned is ``RunArchivedError``."""
        try:
            return self.commits.execute(command, attempts=attempts, exhausted=exhausted)
        except (RunNotFoundError, ParentRunMissingError, DecisionRunMissingError) as error:
            archived = self._archived_run(error)
            if archived is None:
                raise
            raise archived from None

    # -- pruned run trees (DESIGN.md "Retention") -------------------------------------------

    def archived_error(self, run_id: str, aggregate_id: UUID) -> RunArchivedError | None:
        """``RunArchivedError`` for ``run_id`` if ``aggregate_id`` was in a pruned tree."""
        archive_id = self.wiring.archive_of(aggregate_id)
        if archive_id is None:
            return None
        archive = self.load(RunTreeArchive, archive_id)
        if archive is None:
            # The guard names a tombstone the log does not hold: the tree was restored.
            return None
        return RunArchivedError(
            run_id, archive.archived_at.isoformat(), archive.bundle_sha256, archive.bundle
        )

    def archived_refusal(self, aggregates: Sequence[BaseAggregate[UUID]]) -> Exception | None:
        """Why the storage refused a save that wrote to a pruned tree (its guard): the run
        of the first archived aggregate among those the command changed."""
        for aggregate in aggregates:
            run_id = getattr(aggregate, "run_id", None)
            archive_id = self.wiring.archive_of(aggregate.id)
            if archive_id is None:
                continue
            archive = self.load(RunTreeArchive, archive_id)
            if archive is None:
                continue
            return RunArchivedError(
                run_id if isinstance(run_id, str) else archive.root_run_id,
                archive.archived_at.isoformat(),
                archive.bundle_sha256,
                archive.bundle,
            )
        return None

    def _archived_run(
        self, error: RunNotFoundError | ParentRunMissingError | DecisionRunMissingError
    ) -> RunArchivedError | None:
        if isinstance(error, RunArchivedError) or not isinstance(error.run_id, str):
            return None
        return self.archived_error(error.run_id, run_aggregate_id(error.run_id))

    # -- runs -----------------------------------------------------------------------------

    def create_run(
        self,
        run_id: str,
        *,
        workflow_name: str,
        input: JsonValue,
        workflow_ref: str | None = None,
        title: str | None = None,
        parent_run_id: str | None = None,
        status: StartStatus = "running",
    ) -> RunRecord:
        """Create a root run, or a continuation child of ``parent_run_id`` (it takes the
        parent's settings scopes); ``status="queued"`` reserves a run no worker has started."""
        check_run_id(run_id)

        def command(unit: CommandUnit) -> RunRecord:
            run = lineage.create_run(
                unit,
                run_id,
                workflow_name=workflow_name,
                input=input,
                workflow_ref=workflow_ref,
                title=title,
                parent_run_id=parent_run_id,
                status=status,
                actor=HOST,
                now=unit.now,
            )
            return run.to_record()

        return self.execute(command)

    def bind_origin_session(
        self, run_id: str, session_id: str, *, execution_mode: ExecutionMode = "interactive"
    ) -> RunRecord:
        """Bind the run to its origin Pi session; the first binding wins."""

        def command(unit: CommandUnit) -> RunRecord:
            run = unit.run(run_id)
            run.bind_origin_session(session_id, execution_mode, actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def record_progress(
        self,
        run_id: str,
        *,
        status: ProgressStatus,
        current_node: str | None = None,
        current_attempt_id: str | None = None,
        waiting_on: str | None = None,
        status_detail: str | None = None,
        authority: RunClaim | None = None,
    ) -> RunRecord:
        """Record that the run is running (at a node) or waiting (on a node)."""
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run.record_progress(
                status=status,
                current_node=current_node,
                current_attempt_id=current_attempt_id,
                waiting_on=waiting_on,
                status_detail=status_detail,
                actor=HOST,
                now=unit.now,
            )
            return run.to_record()

        return self.execute(command)

    def pause_run(
        self,
        run_id: str,
        *,
        status_detail: str | None = None,
        authority: RunClaim | None = None,
    ) -> RunRecord:
        """Pause the run, with an optional status detail; its status stays as it is."""
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run.pause(status_detail=status_detail, actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def resume_run(self, run_id: str, *, authority: RunClaim | None = None) -> RunRecord:
        """Resume a paused run."""
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run.resume(actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def set_presentation_instructions(
        self, run_id: str, instructions: str, *, authority: RunClaim | None = None
    ) -> RunRecord:
        """Set how the run's terminal result is presented; they cannot change once set."""
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run.set_presentation_instructions(instructions, actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def publish_update(
        self,
        run_id: str,
        *,
        attempt_id: str,
        update_type: str,
        key: str,
        data: JsonValue,
        authority: RunClaim | None = None,
    ) -> UpdateRecord:
        """Publish a progress update of the run (upstream §3.9 ``publishUpdate``)."""
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> UpdateRecord:
            run = unit.fenced_run(run_id, claim)
            return run.publish_update(
                attempt_id=attempt_id,
                update_type=update_type,
                key=key,
                data=data,
                actor=HOST,
                now=unit.now,
            )

        return self.execute(command)

    def finish_run(
        self,
        run_id: str,
        *,
        status: TerminalStatus,
        final_output: JsonValue = None,
        error: str | None = None,
        status_detail: str | None = None,
        authority: RunClaim | None = None,
    ) -> RunRecord:
        """End the run; a bad end cancels queued follow-ups in the same commit."""
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run_endings.finish_run(
                unit,
                run,
                status=status,
                final_output=final_output,
                error=error,
                status_detail=status_detail,
                actor=HOST,
                now=unit.now,
            )
            return run.to_record()

        return self.execute(command)

    def interrupt_run(
        self,
        run_id: str,
        reason: str = INTERRUPTED_REASON,
        *,
        authority: RunClaim | None = None,
    ) -> RunRecord:
        """Fail a running run because its host stopped; any other run is left as it is."""
        check_interruption_reason(reason)
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run_endings.interrupt_run(unit, run, reason, actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def restart_run(
        self,
        source_run_id: str,
        *,
        session_id: str,
        workflow_message_id: str,
        workflow_turn_id: str | None = None,
    ) -> RestartReceipt:
        """Queue a fresh run of an ended run's approved input (upstream §3.8, decision 9)."""

        def command(unit: CommandUnit) -> RestartReceipt:
            source = unit.run(source_run_id, missing=RunNotFoundError)
            child, adopted = restarts.restart_run(
                unit,
                source,
                session_id=session_id,
                workflow_message_id=workflow_message_id,
                workflow_turn_id=workflow_turn_id,
                now=unit.now,
            )
            return child.to_restart_receipt(adopted=adopted)

        return self.execute(command)

    # -- follow-ups -----------------------------------------------------------------------

    def queue_follow_up(
        self,
        run_id: str,
        *,
        request_id: str,
        target_session_id: str,
        actor: Actor,
        source: str,
        prompt: str,
    ) -> QueuedFollowUp:
        """Queue a prompt for the run's origin session (upstream §4.2, in its order)."""
        check_request_id(request_id)
        check_source(source)
        check_prompt(prompt)
        requester = Actor.coerce(actor)

        def command(unit: CommandUnit) -> QueuedFollowUp:
            follow_up, adopted = outbox.queue_follow_up(
                unit,
                run_id,
                request_id=request_id,
                target_session_id=target_session_id,
                actor=requester,
                source=source,
                prompt=prompt,
                now=unit.now,
            )
            return QueuedFollowUp(follow_up=follow_up.to_record(), adopted=adopted)

        return self.execute(command)

    def remove_follow_up(
        self, run_id: str, follow_up_id: str, *, actor: Actor, source: str
    ) -> FollowUpRecord:
        """Remove an undelivered follow-up (upstream §4.3, in its order)."""
        check_source(source)
        requester = Actor.coerce(actor)

        def command(unit: CommandUnit) -> FollowUpRecord:
            follow_up = outbox.remove_follow_up(
                unit, run_id, follow_up_id, actor=requester, source=source, now=unit.now
            )
            return follow_up.to_record()

        return self.execute(command)

    # -- workflow messages and turns ------------------------------------------------------

    def create_workflow_message(
        self,
        run_id: str,
        *,
        kind: HostMessageKind,
        source_id: str,
        idempotency_key: str,
        content: dict[str, Any],
    ) -> WorkflowMessageRecord:
        """Create a host message (step, decision, notification) for the run's origin session."""
        host_kind, source, key, checked = check_host_message(
            kind, source_id, idempotency_key, content
        )
        message_id = workflow_message_id_for(host_kind, source, key)

        def command(unit: CommandUnit) -> WorkflowMessageRecord:
            message = outbox.create_host_message(
                unit,
                run_id,
                message_id,
                kind=host_kind,
                source_id=source,
                content=checked,
                actor=HOST,
                now=unit.now,
            )
            return message.to_record()

        return self.execute(command)

    def report_branch(
        self,
        session_id: str,
        entries: Iterable[Sequence[str] | dict[str, str]],
        *,
        allowed_ids: Iterable[str],
    ) -> list[WorkflowMessageRecord]:
        """Adopt branch evidence: the only way a message becomes ``sent`` (upstream adoptBranch)."""
        pairs, allowed = branch_entries(entries, allowed_ids)

        def command(unit: CommandUnit) -> list[WorkflowMessageRecord]:
            adopted = outbox.adopt_branch(unit, session_id, pairs, allowed, now=unit.now)
            return [message.to_record() for message in adopted]

        return self.execute(command)

    def start_turn(
        self,
        workflow_message_id: str,
        *,
        run_id: str,
        target_session_id: str,
        workflow_turn_id: str | None = None,
    ) -> TurnRecord:
        """Start the model turn a sent message triggered; idempotent on the turn id."""
        turn_id = check_turn_id(workflow_turn_id)

        def command(unit: CommandUnit) -> TurnRecord:
            message, started = outbox.start_turn(
                unit,
                workflow_message_id,
                run_id=run_id,
                target_session_id=target_session_id,
                workflow_turn_id=turn_id,
                now=unit.now,
            )
            return message.turn_record(started)

        return self.execute(command)

    def end_turn(
        self,
        workflow_turn_id: str,
        *,
        stop_reason: StopReason,
        response_session_entry_id: str | None = None,
    ) -> TurnRecord:
        """End a turn; repeating the same end report returns the saved turn."""

        def command(unit: CommandUnit) -> TurnRecord:
            reservation = unit.reservation(workflow_turn_id)
            message = unit.message(reservation.workflow_message_id)
            message.end_turn(
                reservation.workflow_turn_id,
                stop_reason=stop_reason,
                response_session_entry_id=response_session_entry_id,
                actor=Actor("session", reservation.target_session_id),
                now=unit.now,
            )
            return message.turn_record(reservation.workflow_turn_id)

        return self.execute(command)

    # -- settings -------------------------------------------------------------------------

    def ensure_settings_scope(
        self,
        run_id: str,
        *,
        mount_path: str = "",
        invocation: int = 1,
        settings: JsonValue,
        policy: dict[str, Any],
    ) -> SettingsScopeRecord:
        """The run's settings scope for a mount and invocation, created once (upstream §9.1)."""
        mount = check_mount_path(mount_path)
        number = check_invocation(invocation)
        checked_policy = check_policy(policy)

        def command(unit: CommandUnit) -> SettingsScopeRecord:
            scope = settings_changes.ensure_settings_scope(
                unit,
                run_id,
                mount_path=mount,
                invocation=number,
                settings=settings,
                policy=checked_policy,
                actor=HOST,
                now=unit.now,
            )
            return scope.to_record()

        return self.execute(command)

    def change_settings(
        self,
        run_id: str,
        scope_id: str,
        *,
        request_id: str,
        actor: Actor,
        source: str,
        patch: list[dict[str, Any]],
        expected_change_number: int | None = None,
    ) -> SettingsChange:
        """Apply an RFC 6902 patch to a scope under its policy (upstream §9.2, in its order)."""
        check_request_id(request_id)
        check_source(source)
        operations = check_patch(patch)
        requester = Actor.coerce(actor)
        expected = check_expected_change_number(expected_change_number)

        def command(unit: CommandUnit) -> SettingsChange:
            return settings_changes.change_settings(
                unit,
                run_id,
                scope_id,
                request_id=request_id,
                patch=operations,
                actor=requester,
                source=source,
                expected_change_number=expected,
                now=unit.now,
            )

        # With an expected number a lost race surfaces as "settings changed" on the rerun.
        return self.execute(
            command,
            attempts=settings_changes.SETTINGS_ATTEMPTS,
            exhausted=SettingsKeptChangingError,
        )

    # -- human decisions ------------------------------------------------------------------

    def request_human_decision(
        self, run_id: str, *, node_id: str, attempt_id: str, request: dict[str, Any]
    ) -> HumanDecisionRecord:
        """Open the decision of a node attempt; the same request again is adopted (§9.3)."""
        check_decision_run_id(run_id)
        node = check_identifier("node ID", node_id)
        attempt = check_identifier("attempt ID", attempt_id)
        checked = check_request(request)
        decision_id = decision_id_for(run_id, node, attempt)

        def command(unit: CommandUnit) -> HumanDecisionRecord:
            prior = unit.get(HumanDecision, decision_aggregate_id(decision_id))
            if prior is not None:
                prior.check_same_request(checked)
                return prior.to_record(adopted=True)
            unit.run(run_id, missing=DecisionRunMissingError)
            decision = HumanDecision.open(
                decision_id,
                run_id=run_id,
                node_id=node,
                attempt_id=attempt,
                request=checked,
                actor=HOST,
                now=unit.now,
            )
            return unit.add(decision).to_record()

        return self.execute(command)

    def answer_human_decision(
        self,
        decision_id: str,
        *,
        actor: Actor,
        response: dict[str, Any],
        submission_id: str,
        continue_run: bool = False,
    ) -> DecisionSubmission:
        """Submit an answer; the first accepted one wins (decision 26).

        With ``continue_run`` an answer that won (or its retry) also creates the continuation
        child, in the same commit as ``decision.accepted``.
        """
        answerer = Actor.coerce(actor)
        submission = check_identifier("submission ID", submission_id)
        check_flag("continue_run", continue_run)

        def command(unit: CommandUnit) -> DecisionSubmission:
            decision = self._decision(unit, decision_id)
            outcome = decision.submit(submission, response, actor=answerer, now=unit.now)
            child = None
            if continue_run and outcome in ("won", "adopted"):
                child = lineage.continue_after_decision(
                    unit, decision, None, now=unit.now
                ).to_record()
            return DecisionSubmission(
                decision_id=decision.decision_id,
                submission_id=submission,
                outcome=outcome,
                decision=decision.to_record(),
                continuation=child,
            )

        return self.execute(command)

    def apply_decision_timeout(
        self, decision_id: str, *, continue_run: bool = False
    ) -> HumanDecisionRecord:
        """At the deadline: accept the default answer, or cancel without one."""
        check_flag("continue_run", continue_run)

        def command(unit: CommandUnit) -> HumanDecisionRecord:
            decision = self._decision(unit, decision_id)
            decision.apply_timeout(now=unit.now)
            if continue_run and decision.status == "accepted":
                lineage.continue_after_decision(unit, decision, None, now=unit.now)
            return decision.to_record()

        return self.execute(command)

    def cancel_human_decision(
        self, decision_id: str, *, provenance: str = "explicit_cancel"
    ) -> HumanDecisionRecord:
        """Cancel a pending decision (``explicit_cancel`` or ``expired_no_default``)."""
        checked = check_cancel_provenance(provenance)

        def command(unit: CommandUnit) -> HumanDecisionRecord:
            decision = self._decision(unit, decision_id)
            decision.cancel(checked, now=unit.now)
            return decision.to_record()

        return self.execute(command)

    def continue_after_decision(self, decision_id: str, *, run_id: str | None = None) -> RunRecord:
        """Create (once) the continuation child of an accepted decision, with its receipt.

        ``run_id`` names the child; by default ``continuation-<decision id without "decision-">``.
        """
        if run_id is not None:
            check_run_id(run_id)

        def command(unit: CommandUnit) -> RunRecord:
            decision = self._decision(unit, decision_id)
            return lineage.continue_after_decision(unit, decision, run_id, now=unit.now).to_record()

        return self.execute(command)

    def get_human_decision(self, decision_id: str) -> HumanDecisionRecord | None:
        if not is_decision_id(looked_up_id("decision_id", decision_id)):
            return None
        decision = self.load(HumanDecision, decision_aggregate_id(decision_id))
        return None if decision is None else decision.to_record()

    @staticmethod
    def _decision(unit: CommandUnit, decision_id: object) -> HumanDecision:
        found = (
            unit.get(HumanDecision, decision_aggregate_id(decision_id))
            if is_decision_id(decision_id)
            else None
        )
        if found is None:
            raise DecisionNotFoundError(decision_id)
        return found

    # -- run leases (upstream §3.10, §8.3; decisions 16, 22, 26) --------------------------

    def claim_run(
        self, run_id: str, *, owner_type: str, owner_id: str, lease_ms: int = DEFAULT_LEASE_MS
    ) -> RunClaim | None:
        """Take the run's lease; None while any live lease exists (decision 22)."""
        duration = check_lease_ms(lease_ms)
        owner = check_owner(owner_type, owner_id)
        token = new_token()

        def command(unit: CommandUnit) -> RunClaim | None:
            run = unit.run(run_id)
            return run.claim(owner, token=token, lease_ms=duration, now=unit.now)

        return self.execute(command)

    def renew_claim(self, claim: RunClaim, *, lease_ms: int = DEFAULT_LEASE_MS) -> RunClaim:
        """Extend the current, unexpired lease; otherwise ``Lease is no longer current``."""
        current = check_claim(claim)
        duration = check_lease_ms(lease_ms)

        def command(unit: CommandUnit) -> RunClaim:
            run = unit.run(current.run_id)
            return run.renew_claim(current, lease_ms=duration, now=unit.now)

        return self.execute(command)

    def release_claim(self, claim: RunClaim) -> None:
        """Give the lease up (also after it expired); a claim that is not current is refused."""
        current = check_claim(claim)

        def command(unit: CommandUnit) -> None:
            run = unit.run(current.run_id)
            run.release_claim(current, now=unit.now)

        self.execute(command)

    # -- session recording (upstream §3.12; decisions 21, 26) -----------------------------

    def fence_session_write(self, unit: CommandUnit, run_id: str, claim: RunClaim | None) -> Run:
        """Upstream assertSessionWriteAuthority: the run exists; its write authority holds,
        unless the store lets the host record sessions (0.16.2)."""
        if self.allow_host_session_recording:
            return unit.run(run_id)
        return unit.fenced_run(run_id, claim)

    def record_session_binding(
        self,
        run_id: str,
        binding: dict[str, Any],
        *,
        attempt_id: str | None = None,
        authority: RunClaim | None = None,
    ) -> SessionSegmentRecord:
        """Start recording a Pi session for the run (attempt); binding again is a no-op."""
        check_run_id(run_id)
        checked, session_id = check_binding(run_id, binding)
        attempt = check_attempt_id(attempt_id)
        claim = check_authority(authority)
        segment_id = segment_id_for(run_id, attempt)

        def command(unit: CommandUnit) -> SessionSegmentRecord:
            existing = unit.get(SessionSegment, segment_aggregate_id(segment_id))
            if existing is not None:
                return existing.to_record()
            run = self.fence_session_write(unit, run_id, claim)
            segment = unit.add(
                SessionSegment.bind(
                    segment_id,
                    run_id=run_id,
                    attempt_id=attempt,
                    session_id=session_id,
                    binding=checked,
                    now=unit.now,
                )
            )
            # Upstream inserts the run binding or ignores it: the first binding wins.
            run.bind_origin_session(session_id, "interactive", actor=HOST, now=unit.now)
            return segment.to_record()

        return self.execute(command)

    def append_session_entry(
        self,
        run_id: str,
        entry: dict[str, Any],
        *,
        attempt_id: str | None = None,
        authority: RunClaim | None = None,
    ) -> int:
        """Record one Pi session entry; returns its sequence in the segment."""
        checked = check_entry(entry)
        segment_id = segment_id_for(run_id, check_attempt_id(attempt_id))
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> int:
            self.fence_session_write(unit, run_id, claim)
            return unit.segment(segment_id).append_entry(checked, now=unit.now)

        return self.execute(command)

    def append_session_events(
        self,
        run_id: str,
        records: list[dict[str, Any]],
        *,
        attempt_id: str | None = None,
        authority: RunClaim | None = None,
    ) -> SessionSegmentRecord | None:
        """Record a batch of durable session events as one event; an empty batch is a no-op."""
        batch = check_event_batch(records)
        segment_id = segment_id_for(run_id, check_attempt_id(attempt_id))
        claim = check_authority(authority)
        if not batch:
            return None

        def command(unit: CommandUnit) -> SessionSegmentRecord:
            self.fence_session_write(unit, run_id, claim)
            segment = unit.segment(segment_id)
            segment.append_events(batch, now=unit.now)
            return segment.to_record()

        return self.execute(command)

    def update_session_capture(
        self,
        run_id: str,
        capture: dict[str, Any],
        *,
        attempt_id: str | None = None,
        authority: RunClaim | None = None,
    ) -> SessionSegmentRecord:
        """Record the capture's state; a failed or complete capture keeps its end."""
        checked, status = check_capture(capture)
        segment_id = segment_id_for(run_id, check_attempt_id(attempt_id))
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> SessionSegmentRecord:
            self.fence_session_write(unit, run_id, claim)
            segment = unit.segment(segment_id)
            segment.update_capture(checked, status, now=unit.now)
            return segment.to_record()

        return self.execute(command)

    def session_segments(self, run_id: str) -> list[SessionSegmentRecord]:
        """The run's segments in binding order, each with upstream's integrity diagnostics."""
        run = self.load(Run, run_aggregate_id(run_id)) if isinstance(run_id, str) else None
        if run is None:
            return []
        return [
            segment.to_record(run_has_ended=run.has_ended) for segment in self._segments_of(run_id)
        ]

    def session_entries(
        self, run_id: str, *, start: int = 0, limit: int = 100
    ) -> list[SessionEntryRecord]:
        """The run's recorded entries, segment by segment, from offset ``start``."""
        entries = (
            SessionEntryRecord(
                segment_id=segment.segment_id,
                attempt_id=segment.attempt_id,
                entry_seq=event.entry_seq,
                entry_id=event.entry_id,
                entry=event.entry,
                recorded_at=event.timestamp,
            )
            for segment in self._segments_of(run_id)
            for event in self._segment_events(segment, SessionSegment.EntryAppended)
        )
        return _page(entries, start, limit)

    def session_events(
        self, run_id: str, *, start: int = 0, limit: int = 100
    ) -> list[SessionEventRecord]:
        """The run's durable session event records, segment by segment, from offset ``start``."""
        records = (
            SessionEventRecord(
                segment_id=segment.segment_id,
                seq=record["seq"],
                type=record["type"],
                at=record["at"],
                node_id=record["nodeId"],
                attempt_id=record["attemptId"],
                payload=record["payload"],
                recorded_at=batch.timestamp,
            )
            for segment in self._segments_of(run_id)
            for batch in self._segment_events(segment, SessionSegment.EventsAppended)
            for record in batch.records
        )
        return _page(records, start, limit)

    def _segments_of(self, run_id: object) -> list[SessionSegment]:
        if not isinstance(run_id, str):
            return []
        found = (
            self.load(SessionSegment, aggregate_id)
            for aggregate_id in self.commits.originator_ids_by_key(segments_of_run_key(run_id))
        )
        return [segment for segment in found if segment is not None]

    def _segment_events(self, segment: SessionSegment, cls: type[E]) -> Iterator[E]:
        for event in self.events.get(segment.id):
            if isinstance(event, cls):
                yield event

    # -- managed effects (upstream §9.4; decisions 17, 23, 26) ----------------------------

    def reserve_effect(
        self,
        run_id: str,
        *,
        effect_type: str,
        key: str,
        request: dict[str, Any],
        authority: RunClaim | None = None,
    ) -> EffectReservation:
        """Reserve a side effect before applying it; only ``new`` and ``new_attempt`` apply."""
        kind = check_label("type", effect_type)
        label = check_label("key", key)
        checked, recovery = check_effect_request(request)
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> EffectReservation:
            run = unit.fenced_run(run_id, claim)
            effect_id = effect_id_for(run.run_id, kind, label)
            effect = unit.get(Effect, effect_aggregate_id(effect_id))
            if effect is None:
                effect = unit.add(
                    Effect.reserve_new(
                        effect_id,
                        run_id=run.run_id,
                        effect_type=kind,
                        key=label,
                        request=checked,
                        recovery=recovery,
                        actor=HOST,
                        now=unit.now,
                    )
                )
                return EffectReservation(effect=effect.to_record(), outcome="new")
            outcome = effect.reserve_again(checked, actor=HOST, now=unit.now)
            return EffectReservation(effect=effect.to_record(), outcome=outcome)

        return self.execute(command)

    def settle_effect(
        self,
        effect_id: str,
        *,
        attempt: int,
        outcome: str,
        result: JsonValue = None,
        authority: RunClaim | None = None,
    ) -> EffectRecord:
        """End the applying attempt of an effect: applied or failed."""
        settled = check_outcome(outcome)
        claim = check_authority(authority)

        def command(unit: CommandUnit) -> EffectRecord:
            effect = unit.effect(effect_id)
            unit.fenced_run(effect.run_id, claim)
            effect.settle(attempt=attempt, outcome=settled, result=result, actor=HOST, now=unit.now)
            return effect.to_record()

        return self.execute(command)

    def recover_applying_effects(self, run_id: str) -> RecoveryVerdict:
        """After a crash: idempotent applying effects become retry_ready, manual ones
        ambiguous; ``"ambiguous"`` if any became ambiguous, else ``"safe"``."""

        def command(unit: CommandUnit) -> RecoveryVerdict:
            unit.run(run_id)
            ambiguous = [e.recover(actor=SYSTEM, now=unit.now) for e in unit.effects_of(run_id)]
            return "ambiguous" if any(ambiguous) else "safe"

        return self.execute(command)

    def retry_effect(self, effect_id: str) -> EffectRecord:
        """Let a failed or ambiguous effect be attempted again by the next reservation."""

        def command(unit: CommandUnit) -> EffectRecord:
            effect = unit.effect(effect_id)
            effect.retry(actor=HOST, now=unit.now)
            return effect.to_record()

        return self.execute(command)

    def get_effect(self, effect_id: str) -> EffectRecord | None:
        """The effect as its events leave it, or None for an unknown id."""
        looked_up_id("effect_id", effect_id)
        effect = self.load(Effect, effect_aggregate_id(effect_id))
        return None if effect is None else effect.to_record()

    # -- consistent reads -----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        """The run as its events leave it, or None for an unknown id."""
        return self._run_record(run_id)

    def get_run_as_created(self, run_id: str) -> RunRecord | None:
        """The run as its first event made it, or None for an unknown id: what never changes
        after, its id and its lineage, read without replaying the rest (an audit's export of
        a run of 10k follow-ups loaded them all, a tenth of its time)."""
        return self._run_record(run_id, version=1)

    def _run_record(self, run_id: str, *, version: int | None = None) -> RunRecord | None:
        """The run as of ``version`` (else its last); a pruned run is ``RunArchivedError``."""
        looked_up_id("run_id", run_id)
        aggregate_id = run_aggregate_id(run_id)
        run = self.load(Run, aggregate_id, version=version)
        if run is None:
            archived = self.archived_error(run_id, aggregate_id)
            if archived is not None:
                raise archived
            return None
        return run.to_record()

    def get_follow_up(self, follow_up_id: str) -> FollowUpRecord | None:
        """The follow-up as its events leave it, or None for an unknown id."""
        looked_up_id("follow_up_id", follow_up_id)
        follow_up = self.load(FollowUp, follow_up_aggregate_id(follow_up_id))
        return None if follow_up is None else follow_up.to_record()

    def get_workflow_message(self, workflow_message_id: str) -> WorkflowMessageRecord | None:
        """The workflow message as its events leave it, or None for an unknown id."""
        looked_up_id("workflow_message_id", workflow_message_id)
        message = self.load(WorkflowMessage, message_aggregate_id(workflow_message_id))
        return None if message is None else message.to_record()

    def get_turn(self, workflow_turn_id: str) -> TurnRecord | None:
        """The turn as its message's events leave it, or None for an unknown id."""
        looked_up_id("workflow_turn_id", workflow_turn_id)
        reservation = self.load(TurnReservation, turn_aggregate_id(workflow_turn_id))
        if reservation is None:
            return None
        message = self.load(WorkflowMessage, message_aggregate_id(reservation.workflow_message_id))
        return None if message is None else message.turn_record(workflow_turn_id)


def _page(items: Iterable[T], start: object, limit: object) -> list[T]:
    """Items ``start`` to ``start + limit`` of an ordered stream (both non-negative)."""
    first = page_bound("page start", start)
    # Both may be as large as MAX_COUNT, whose sum no islice takes; no stream is that long.
    stop = min(first + page_bound("page limit", limit), sys.maxsize)
    return list(itertools.islice(items, first, stop))


def page_bound(name: str, value: object) -> int:
    """``value`` as a page bound, or ``InvalidPageError`` naming ``name``."""
    if not is_count(value):
        raise InvalidPageError(name)
    return value
