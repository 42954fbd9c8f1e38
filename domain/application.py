"""The application service: every command and consistent read of the workflow domain.

A command loads what it needs into a unit of work, checks upstream's rules in upstream's
order, and saves every aggregate it changed in one atomic ``save``. Two commands that touch
the same aggregate conflict on its version; the loser reloads and runs again, so nothing
acknowledged is lost and nothing is applied twice.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, ClassVar, Final, TypeVar
from uuid import UUID

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.domain import (
    BaseAggregate,
    ImmutableAggregateProtocol,
    MutableAggregateProtocol,
)
from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    EventStore,
    InfrastructureFactory,
    IntegrityError,
    Mapper,
    Notification,
    TrackingRecorder,
)
from eventsourcing.popo import POPOFactory
from eventsourcing.utils import Environment

from runledger.domain.canonical import json_digest
from runledger.domain.errors import (
    BranchWrongSessionError,
    ConcurrencyError,
    FollowUpNotFoundError,
    InvalidBranchEntryError,
    InvalidMessageIdentityError,
    InvalidMessageKindError,
    InvalidPageError,
    InvalidRunFieldError,
    InvalidTurnIdError,
    MessageNotFoundError,
    NotOriginSessionError,
    ParentRunMissingError,
    RepeatedTerminalOutcomeError,
    RestartRequiresTurnError,
    RunAlreadyExistsError,
    RunHasNoOriginSessionError,
    RunMissingError,
    RunNotFoundError,
    SentFollowUpRemovalError,
    SettingsKeptChangingError,
    SettingsScopeNotFoundError,
    StaleTerminalResultError,
    StaleTerminalTurnError,
    TurnIdentityConflictError,
    TurnNotFoundError,
    UnknownBranchMessageError,
)
from runledger.domain.follow_ups import (
    FollowUp,
    check_prompt,
    check_request_id,
    check_source,
    follow_up_aggregate_id,
    follow_ups_of_run_key,
)
from runledger.domain.ids import (
    default_turn_id,
    follow_up_id_for,
    restart_run_id,
    terminal_message_id,
    workflow_message_id_for,
)
from runledger.domain.outbox import accept_follow_up, terminal_message
from runledger.domain.ports import EventStorage
from runledger.domain.records import (
    ActorRecord,
    FollowUpRecord,
    LoggedEvent,
    QueuedFollowUp,
    RestartReceipt,
    RunRecord,
    SettingsChange,
    SettingsScopeRecord,
    TurnRecord,
    UpdateRecord,
    WorkflowMessageRecord,
)
from runledger.domain.runs import Run, check_run_id, run_aggregate_id
from runledger.domain.serialisation import LedgerMapper
from runledger.domain.settings_policy import (
    check_expected_change_number,
    check_invocation,
    check_mount_path,
    check_patch,
    check_policy,
    settings_scope_id,
)
from runledger.domain.settings_scopes import (
    SettingsScope,
    settings_aggregate_id,
    settings_of_run_key,
    settings_origin_run_id,
)
from runledger.domain.turn_reservations import TurnReservation, turn_aggregate_id
from runledger.domain.values import (
    BAD_END_STATUSES,
    CHANGEABLE_STATUSES,
    HOST_MESSAGE_KINDS,
    INTERRUPTED_REASON,
    SYSTEM,
    Actor,
    JsonValue,
)
from runledger.domain.workflow_messages import (
    WorkflowMessage,
    check_content,
    message_aggregate_id,
)

Clock = Callable[[], datetime]
A = TypeVar("A", bound=BaseAggregate[UUID])
T = TypeVar("T")

HOST: Final = Actor("host")
CREATE_STATUSES: Final = ("queued", "running", "waiting")
SETTINGS_ATTEMPTS: Final = 8
MAX_LINEAGE_DEPTH: Final = 100
_EVENT_ENVELOPE: Final = frozenset(
    {"originator_id", "originator_version", "timestamp", "originator_topic", "actor"}
)


def utc_now() -> datetime:
    return datetime.now(UTC)


class UnitOfWork:
    """The aggregates one attempt of a command has loaded or created, loaded at most once."""

    def __init__(self, app: WorkflowRuns, now: datetime) -> None:
        self.app = app
        self.now = now
        self._aggregates: dict[UUID, BaseAggregate[UUID] | None] = {}

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        if aggregate_id not in self._aggregates:
            self._aggregates[aggregate_id] = self.app.load(cls, aggregate_id)
        aggregate = self._aggregates[aggregate_id]
        return aggregate if isinstance(aggregate, cls) else None

    def add(self, aggregate: A) -> A:
        # Re-insert so a new aggregate's events follow those of aggregates touched earlier
        # (the log then reads: run accepts, follow-up queued, message created).
        self._aggregates.pop(aggregate.id, None)
        self._aggregates[aggregate.id] = aggregate
        return aggregate

    def changed(self) -> list[BaseAggregate[UUID]]:
        return [a for a in self._aggregates.values() if a is not None and a.pending_events]

    # One typed getter per aggregate, mapping "not found" to the domain's error.

    def run(self, run_id: object, missing: Callable[[object], Exception] = RunMissingError) -> Run:
        run = self.get(Run, run_aggregate_id(run_id)) if isinstance(run_id, str) else None
        if run is None:
            raise missing(run_id)
        return run

    def follow_up(self, follow_up_id: object) -> FollowUp:
        found = (
            self.get(FollowUp, follow_up_aggregate_id(follow_up_id))
            if isinstance(follow_up_id, str)
            else None
        )
        if found is None:
            raise FollowUpNotFoundError(follow_up_id)
        return found

    def message(self, workflow_message_id: object) -> WorkflowMessage:
        found = (
            self.get(WorkflowMessage, message_aggregate_id(workflow_message_id))
            if isinstance(workflow_message_id, str)
            else None
        )
        if found is None:
            raise MessageNotFoundError(workflow_message_id)
        return found

    def reservation(self, workflow_turn_id: object) -> TurnReservation:
        found = (
            self.get(TurnReservation, turn_aggregate_id(workflow_turn_id))
            if isinstance(workflow_turn_id, str)
            else None
        )
        if found is None:
            raise TurnNotFoundError(workflow_turn_id)
        return found

    def settings_scope(self, scope_id: object) -> SettingsScope:
        found = (
            self.get(SettingsScope, settings_aggregate_id(scope_id))
            if isinstance(scope_id, str)
            else None
        )
        if found is None:
            raise SettingsScopeNotFoundError(scope_id)
        return found

    def ancestors(self, run: Run) -> list[Run]:
        """The run's ancestors via parent_run_id, nearest first."""
        chain: list[Run] = []
        current = run
        while current.parent_run_id is not None and len(chain) < MAX_LINEAGE_DEPTH:
            current = self.run(current.parent_run_id)
            chain.append(current)
        return chain


class WorkflowRuns(Application[UUID]):
    """Runs, their lineage, follow-ups and the workflow-message outbox, event-sourced."""

    name = "runledger"
    snapshotting_intervals: ClassVar[
        dict[type[MutableAggregateProtocol[Any]] | type[ImmutableAggregateProtocol[Any]], int]
    ] = {Run: 100}
    max_attempts: ClassVar[int] = 50

    def __init__(
        self,
        storage: EventStorage,
        *,
        clock: Clock = utc_now,
        env: dict[str, str] | None = None,
    ) -> None:
        self.storage = storage
        self.clock = clock
        settings = {"AGGREGATE_CACHE_MAXSIZE": "10000"}
        settings.update(env or {})
        super().__init__(env=settings)

    # -- wiring: storage comes from the composition root, not from the environment -------

    def construct_factory(self, env: Environment) -> InfrastructureFactory[TrackingRecorder]:
        # Only the POPO factory's harmless defaults are used; recorders come from storage.
        return POPOFactory(env)  # type: ignore[return-value]

    def construct_mapper(self) -> Mapper[UUID]:
        return LedgerMapper()

    def construct_recorder(self) -> ApplicationRecorder:
        return self.storage.events

    def construct_snapshot_store(self) -> EventStore[UUID]:
        snapshots: AggregateRecorder = self.storage.snapshots
        return EventStore(mapper=self.mapper, recorder=snapshots)

    def load(self, cls: type[A], aggregate_id: UUID) -> A | None:
        try:
            aggregate: BaseAggregate[UUID] = self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None
        return aggregate if isinstance(aggregate, cls) else None

    def now(self) -> datetime:
        moment = self.clock()
        if moment.tzinfo is None:
            return moment.replace(tzinfo=UTC)
        return moment.astimezone(UTC)

    def execute(
        self,
        command: Callable[[UnitOfWork], T],
        *,
        attempts: int | None = None,
        exhausted: Callable[[], Exception] = ConcurrencyError,
    ) -> T:
        """Run ``command`` and save what it changed, retrying on a version conflict."""
        for attempt in range(self.max_attempts if attempts is None else attempts):
            unit = UnitOfWork(self, self.now())
            result = command(unit)
            changed = unit.changed()
            if not changed:
                return result
            try:
                self.save(*changed)
            except IntegrityError:
                # Another command won the race on one of these aggregates: back off a
                # little (jittered, so two losers do not collide again) and start over.
                time.sleep(random.uniform(0, 0.002 * (attempt + 1)))  # noqa: S311
                continue
            return result
        raise exhausted()

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
        status: str = "running",
    ) -> RunRecord:
        """Create a root run, or a continuation child of ``parent_run_id``."""
        check_run_id(run_id)

        def command(unit: UnitOfWork) -> RunRecord:
            existing = unit.get(Run, run_aggregate_id(run_id))
            if existing is not None:
                raise RunAlreadyExistsError(run_id)
            if status not in CREATE_STATUSES:
                raise InvalidRunFieldError("status", "queued, running or waiting")
            parent = None
            if parent_run_id is not None:
                parent = unit.run(parent_run_id, missing=ParentRunMissingError)
            run = Run.create(
                run_id,
                workflow_name=workflow_name,
                input=input,
                workflow_ref=workflow_ref,
                title=title,
                status=status,
                parent=parent,
                lineage_kind=None if parent is None else "continuation",
                parent_terminal_fingerprint=None,
                actor=HOST,
                now=unit.now,
            )
            unit.add(run)
            if parent is not None:
                self._hand_over_settings(unit, parent, run)
            return run.to_record()

        return self.execute(command)

    def bind_origin_session(
        self, run_id: str, session_id: str, *, execution_mode: str = "interactive"
    ) -> RunRecord:
        """Bind the run to its origin Pi session; the first binding wins."""

        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.run(run_id)
            run.bind_origin_session(session_id, execution_mode, actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def record_progress(
        self,
        run_id: str,
        *,
        status: str,
        current_node: str | None = None,
        current_attempt_id: str | None = None,
        waiting_on: str | None = None,
        status_detail: str | None = None,
    ) -> RunRecord:
        """Record that the run is running (at a node) or waiting (on a node)."""

        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.run(run_id)
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

    def pause_run(self, run_id: str, *, status_detail: str | None = None) -> RunRecord:
        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.run(run_id)
            run.pause(status_detail=status_detail, actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def resume_run(self, run_id: str) -> RunRecord:
        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.run(run_id)
            run.resume(actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def set_presentation_instructions(self, run_id: str, instructions: str) -> RunRecord:
        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.run(run_id)
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
    ) -> UpdateRecord:
        """Publish a progress update of the run (upstream §3.9 ``publishUpdate``)."""

        def command(unit: UnitOfWork) -> UpdateRecord:
            run = unit.run(run_id)
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
        status: str,
        final_output: JsonValue = None,
        error: str | None = None,
        status_detail: str | None = None,
    ) -> RunRecord:
        """End the run; a bad end cancels queued follow-ups in the same commit."""

        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.run(run_id)
            Run.check_finish_status(status)
            run.check_not_ended()
            if error is not None and not isinstance(error, str):
                raise InvalidRunFieldError("error", "text or None")
            if status_detail is not None and not isinstance(status_detail, str):
                raise InvalidRunFieldError("status_detail", "text or None")
            self._end_run(
                unit,
                run,
                status=status,
                final_output=final_output,
                error=error,
                status_detail=status_detail,
                interrupted=False,
            )
            return run.to_record()

        return self.execute(command)

    def interrupt_run(self, run_id: str, reason: str = INTERRUPTED_REASON) -> RunRecord:
        """Fail a running run because its host stopped; any other run is left as it is."""
        if not isinstance(reason, str) or not reason.strip():
            raise InvalidRunFieldError("interruption reason", "a non-empty string")

        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.run(run_id)
            if run.status == "running":
                self._end_run(
                    unit,
                    run,
                    status="failed",
                    final_output=None,
                    error=reason,
                    status_detail=None,
                    interrupted=True,
                )
            return run.to_record()

        return self.execute(command)

    def _end_run(
        self,
        unit: UnitOfWork,
        run: Run,
        *,
        status: str,
        final_output: JsonValue,
        error: str | None,
        status_detail: str | None,
        interrupted: bool,
    ) -> None:
        fingerprint = run.fingerprint_for(status, final_output, error, status_detail)
        message_id = (
            terminal_message_id(run.run_id, fingerprint) if run.presents_terminal_message else None
        )
        run.finish(
            status=status,
            final_output=final_output,
            error=error,
            status_detail=status_detail,
            interrupted=interrupted,
            terminal_message_id=message_id,
            actor=HOST,
            now=unit.now,
        )
        if status in BAD_END_STATUSES:
            self._cancel_follow_ups_after_bad_end(unit, run)
        if run.terminal_message_id is not None:
            # Only a run that gets a presentation message needs its ancestors' outcomes.
            message = terminal_message(
                run, list(reversed(unit.ancestors(run))), actor=HOST, now=unit.now
            )
            if message is not None:
                unit.add(message)

    def _cancel_follow_ups_after_bad_end(self, unit: UnitOfWork, ended: Run) -> None:
        """Upstream §4.6 with DESIGN decisions 1-2: this run and its continuation ancestors.

        A restart child's failure leaves its parent's follow-ups alone, and a follow-up whose
        message already reached the session is not cancelled after the fact.
        """
        reason = (
            ended.error if ended.error is not None else f"Workflow ended with status {ended.status}"
        )
        chain = [ended]
        current = ended
        while current.lineage_kind == "continuation" and current.parent_run_id is not None:
            current = unit.run(current.parent_run_id)
            chain.append(current)
        for ancestor in chain[1:]:
            if ancestor.status in CHANGEABLE_STATUSES:
                # An ancestor that still takes follow-ups gets an event, so its version orders
                # this end against every queue on it, as the ended run's own version does.
                ancestor.record_continuation_ended(
                    ended.run_id, status=ended.status, actor=SYSTEM, now=unit.now
                )
        for run in chain:
            # The Run's version orders this against every queue on it, so the index lists
            # every follow-up accepted before this end (a racing queue conflicts and retries).
            for aggregate_id in self.storage.originator_ids_by_key(
                follow_ups_of_run_key(run.run_id)
            ):
                follow_up = unit.get(FollowUp, aggregate_id)
                if follow_up is None or follow_up.state != "queued":
                    continue
                message = unit.message(follow_up.workflow_message_id)
                if message.status == "sent":
                    continue
                follow_up.cancel(
                    ended_run_id=ended.run_id,
                    status=ended.status,
                    reason=reason,
                    actor=SYSTEM,
                    now=unit.now,
                )
                message.cancel_if_pending(actor=SYSTEM, now=unit.now)

    def restart_run(
        self,
        source_run_id: str,
        *,
        session_id: str,
        workflow_message_id: str,
        workflow_turn_id: str | None = None,
    ) -> RestartReceipt:
        """Queue a fresh run of an ended run's approved input (upstream §3.8, decision 9)."""

        def command(unit: UnitOfWork) -> RestartReceipt:
            source = unit.run(source_run_id, missing=RunNotFoundError)
            source.check_restartable_by(session_id)
            if source.terminal_message_id != workflow_message_id:
                raise StaleTerminalResultError()
            message = unit.message(workflow_message_id)
            if message.target_session_id != session_id or message.status != "sent":
                raise StaleTerminalResultError()
            turn_id = message.latest_turn_id
            if turn_id is None:
                raise RestartRequiresTurnError()
            if workflow_turn_id is not None and workflow_turn_id != turn_id:
                raise StaleTerminalTurnError()
            if source.restart_child_id is not None:
                child = unit.run(source.restart_child_id)
                return _receipt(child, adopted=True)
            fingerprint = source.terminal_fingerprint
            if any(
                run.parent_terminal_fingerprint == fingerprint
                for run in (source, *unit.ancestors(source))
            ):
                raise RepeatedTerminalOutcomeError()
            child_id = restart_run_id(workflow_message_id)
            if unit.get(Run, run_aggregate_id(child_id)) is not None:
                raise RunAlreadyExistsError(child_id)
            actor = Actor("session", session_id)
            child = unit.add(
                Run.create(
                    child_id,
                    workflow_name=source.workflow_name,
                    input=source.input,
                    workflow_ref=source.workflow_ref,
                    title=source.title,
                    status="queued",
                    parent=source,
                    lineage_kind="restart",
                    parent_terminal_fingerprint=fingerprint,
                    actor=actor,
                    now=unit.now,
                )
            )
            child.bind_origin_session(session_id, "interactive", actor=actor, now=unit.now)
            source.record_restart_child(
                child_id,
                workflow_message_id=workflow_message_id,
                workflow_turn_id=turn_id,
                actor=actor,
                now=unit.now,
            )
            return _receipt(child, adopted=False)

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

        def command(unit: UnitOfWork) -> QueuedFollowUp:
            if not isinstance(run_id, str):
                raise RunMissingError(run_id)
            follow_up_id = follow_up_id_for(run_id, request_id)
            prior = unit.get(FollowUp, follow_up_aggregate_id(follow_up_id))
            if prior is not None:
                # Adoption comes before the status check: a retry after the run ended
                # still gets its original answer, whatever has happened to it since.
                prior.check_same_request(
                    target_session_id=target_session_id,
                    actor=requester,
                    source=source,
                    prompt=prompt,
                )
                return QueuedFollowUp(follow_up=prior.to_record(), adopted=True)
            run = unit.run(run_id)
            run.check_accepts_changes()
            if run.origin_session_id is None or run.origin_session_id != target_session_id:
                raise NotOriginSessionError()
            follow_up, message = accept_follow_up(
                run,
                follow_up_id,
                request_id=request_id,
                target_session_id=target_session_id,
                actor=requester,
                source=source,
                prompt=prompt,
                now=unit.now,
            )
            unit.add(follow_up)
            unit.add(message)
            return QueuedFollowUp(follow_up=follow_up.to_record(), adopted=False)

        return self.execute(command)

    def remove_follow_up(
        self, run_id: str, follow_up_id: str, *, actor: Actor, source: str
    ) -> FollowUpRecord:
        """Remove an undelivered follow-up (upstream §4.3, in its order)."""
        check_source(source)
        requester = Actor.coerce(actor)

        def command(unit: UnitOfWork) -> FollowUpRecord:
            follow_up = unit.follow_up(follow_up_id)
            follow_up.check_part_of(run_id)
            if follow_up.state == "removed":
                return follow_up.to_record()
            follow_up.check_removable_by(requester, source)
            message = unit.message(follow_up.workflow_message_id)
            if message.status == "sent":
                raise SentFollowUpRemovalError()
            follow_up.remove(actor=requester, source=source, now=unit.now)
            message.cancel_if_pending(actor=requester, now=unit.now)
            return follow_up.to_record()

        return self.execute(command)

    # -- workflow messages and turns ------------------------------------------------------

    def create_workflow_message(
        self,
        run_id: str,
        *,
        kind: str,
        source_id: str,
        idempotency_key: str,
        content: dict[str, Any],
    ) -> WorkflowMessageRecord:
        """Create a host message (step, decision, notification) for the run's origin session."""
        if kind not in HOST_MESSAGE_KINDS:
            raise InvalidMessageKindError(kind, ", ".join(HOST_MESSAGE_KINDS))
        for name, value in (("source ID", source_id), ("idempotency key", idempotency_key)):
            if not isinstance(value, str) or not value:
                raise InvalidMessageIdentityError(name)
        checked = check_content(kind, content)
        message_id = workflow_message_id_for(kind, source_id, idempotency_key)

        def command(unit: UnitOfWork) -> WorkflowMessageRecord:
            run = unit.run(run_id)
            if run.origin_session_id is None:
                raise RunHasNoOriginSessionError(run_id)
            existing = unit.get(WorkflowMessage, message_aggregate_id(message_id))
            if existing is not None:
                existing.check_same_creation(
                    run_id=run_id,
                    target_session_id=run.origin_session_id,
                    kind=kind,
                    source_id=source_id,
                    content=checked,
                )
                return existing.to_record()
            message = WorkflowMessage.create(
                message_id,
                run_id=run_id,
                target_session_id=run.origin_session_id,
                kind=kind,
                source_id=source_id,
                content=checked,
                actor=HOST,
                now=unit.now,
            )
            return unit.add(message).to_record()

        return self.execute(command)

    def cancel_pending_for_source(self, source_id: str, *, kind: str | None = None) -> int:
        """Cancel every pending message of a source (and kind); returns how many."""

        def command(unit: UnitOfWork) -> int:
            cancelled = 0
            # Looked up again on every attempt, so a retry also sees messages created since.
            for aggregate_id in self.storage.originator_ids_by_key(source_id):
                message = unit.get(WorkflowMessage, aggregate_id)
                if message is None or message.source_id != source_id:
                    continue
                if kind is not None and message.kind != kind:
                    continue
                cancelled += message.cancel_if_pending(actor=HOST, now=unit.now)
            return cancelled

        return self.execute(command)

    def report_branch(
        self,
        session_id: str,
        entries: Iterable[Sequence[str] | dict[str, str]],
        *,
        allowed_ids: Iterable[str],
    ) -> list[WorkflowMessageRecord]:
        """Adopt branch evidence: the only way a message becomes ``sent`` (upstream adoptBranch)."""
        if isinstance(entries, (str, bytes, dict)) or not isinstance(entries, Iterable):
            raise InvalidBranchEntryError()
        if isinstance(allowed_ids, (str, bytes)) or not isinstance(allowed_ids, Iterable):
            raise InvalidBranchEntryError()
        pairs = [_branch_pair(entry) for entry in entries]
        allowed = {message_id for message_id in allowed_ids if isinstance(message_id, str)}
        actor = Actor("session", session_id if isinstance(session_id, str) else None)

        def command(unit: UnitOfWork) -> list[WorkflowMessageRecord]:
            adopted: list[WorkflowMessage] = []
            for message_id, entry_id in pairs:
                if message_id not in allowed:
                    raise UnknownBranchMessageError(message_id)
                message = unit.message(message_id)
                if message.target_session_id != session_id:
                    raise BranchWrongSessionError()
                message.adopt_entry(entry_id, actor=actor, now=unit.now)
                adopted.append(message)
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
        if workflow_turn_id is not None and (
            not isinstance(workflow_turn_id, str) or not workflow_turn_id
        ):
            raise InvalidTurnIdError()
        actor = Actor("session", target_session_id if isinstance(target_session_id, str) else None)

        def command(unit: UnitOfWork) -> TurnRecord:
            if workflow_turn_id is not None:
                reserved = unit.get(TurnReservation, turn_aggregate_id(workflow_turn_id))
                if reserved is not None:
                    if not reserved.matches(
                        workflow_message_id=workflow_message_id,
                        run_id=run_id,
                        target_session_id=target_session_id,
                    ):
                        raise TurnIdentityConflictError(workflow_turn_id)
                    return unit.message(workflow_message_id).turn_record(workflow_turn_id)
            message = unit.message(workflow_message_id)
            message.check_turn_identity(run_id=run_id, target_session_id=target_session_id)
            turn_id = workflow_turn_id or default_turn_id(
                message.workflow_message_id, len(message.turn_ids) + 1
            )
            message.start_turn(turn_id, actor=actor, now=unit.now)
            unit.add(
                TurnReservation.reserve(
                    turn_id,
                    workflow_message_id=message.workflow_message_id,
                    run_id=message.run_id,
                    target_session_id=message.target_session_id,
                    actor=actor,
                    now=unit.now,
                )
            )
            return message.turn_record(turn_id)

        return self.execute(command)

    def end_turn(
        self,
        workflow_turn_id: str,
        *,
        stop_reason: str,
        response_session_entry_id: str | None = None,
    ) -> TurnRecord:
        """End a turn; repeating the same end report returns the saved turn."""

        def command(unit: UnitOfWork) -> TurnRecord:
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

    # -- settings ---------------------------------------------------------------------------

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
        check_mount_path(mount_path)
        check_invocation(invocation)
        checked_policy = check_policy(policy)

        def command(unit: UnitOfWork) -> SettingsScopeRecord:
            run = unit.run(run_id)
            run.check_running()
            origin = settings_origin_run_id(run, lambda child: unit.run(child.parent_run_id))
            scope_id = settings_scope_id(origin, mount_path, invocation)
            existing = unit.get(SettingsScope, settings_aggregate_id(scope_id))
            if existing is not None:
                existing.check_ensured_by(run.run_id)
                return existing.to_record()
            scope = SettingsScope.create(
                scope_id,
                run_id=run.run_id,
                origin_run_id=origin,
                mount_path=mount_path,
                invocation=invocation,
                policy=checked_policy,
                settings=settings,
                actor=HOST,
                now=unit.now,
            )
            return unit.add(scope).to_record()

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
        patch_digest = json_digest(operations)
        requester = Actor.coerce(actor)
        check_expected_change_number(expected_change_number)

        def command(unit: UnitOfWork) -> SettingsChange:
            scope = unit.settings_scope(scope_id)
            prior = scope.prior_change(
                request_id, patch_digest=patch_digest, actor=requester, source=source
            )
            if prior is not None:
                return SettingsChange(scope=scope.to_record(), change=prior, adopted=True)
            scope.check_active_for(run_id)
            unit.run(run_id).check_accepts_changes()
            scope.check_expected(expected_change_number)
            change = scope.change(
                request_id,
                patch=operations,
                patch_digest=patch_digest,
                actor=requester,
                source=source,
                now=unit.now,
            )
            return SettingsChange(scope=scope.to_record(), change=change, adopted=False)

        # With an expected number a lost race surfaces as "settings changed" on the rerun.
        return self.execute(
            command, attempts=SETTINGS_ATTEMPTS, exhausted=SettingsKeptChangingError
        )

    def _hand_over_settings(self, unit: UnitOfWork, parent: Run, child: Run) -> None:
        """Upstream §3.6 with decision 4: the parent's active scopes go to its continuation."""
        # Looked up on every attempt, so a retry also sees scopes created since.
        for aggregate_id in self.storage.originator_ids_by_key(settings_of_run_key(parent.run_id)):
            scope = unit.get(SettingsScope, aggregate_id)
            if scope is not None and scope.active_run_id == parent.run_id:
                scope.move_to(child.run_id, actor=HOST, now=unit.now)

    # -- consistent reads -----------------------------------------------------------------

    def get_run(self, run_id: str) -> RunRecord | None:
        if not isinstance(run_id, str):
            return None
        run = self.load(Run, run_aggregate_id(run_id))
        return None if run is None else run.to_record()

    def get_follow_up(self, follow_up_id: str) -> FollowUpRecord | None:
        if not isinstance(follow_up_id, str):
            return None
        follow_up = self.load(FollowUp, follow_up_aggregate_id(follow_up_id))
        return None if follow_up is None else follow_up.to_record()

    def get_workflow_message(self, workflow_message_id: str) -> WorkflowMessageRecord | None:
        if not isinstance(workflow_message_id, str):
            return None
        message = self.load(WorkflowMessage, message_aggregate_id(workflow_message_id))
        return None if message is None else message.to_record()

    def get_turn(self, workflow_turn_id: str) -> TurnRecord | None:
        if not isinstance(workflow_turn_id, str):
            return None
        reservation = self.load(TurnReservation, turn_aggregate_id(workflow_turn_id))
        if reservation is None:
            return None
        message = self.load(WorkflowMessage, message_aggregate_id(reservation.workflow_message_id))
        return None if message is None else message.turn_record(workflow_turn_id)

    def event_log(
        self, *, after: int = 0, limit: int = 1000, run_id: str | None = None
    ) -> list[LoggedEvent]:
        """Stored events in log order; with ``run_id`` only that run's and its children's."""
        for name, value in (("log position", after), ("log limit", limit)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidPageError(name)
        notifications = self.storage.select_log(after=after, limit=limit, run_id=run_id)
        return [self.logged_event(notification) for notification in notifications]

    def logged_event(self, notification: Notification) -> LoggedEvent:
        event = self.mapper.to_domain_event(notification)
        state = vars(event)
        actor = state.get("actor") or {"type": "system", "id": None}
        return LoggedEvent(
            position=notification.id,
            wire_name=notification.topic,
            aggregate_id=str(notification.originator_id),
            version=notification.originator_version,
            recorded_at=state["timestamp"],
            actor=ActorRecord(type=actor["type"], id=actor.get("id")),
            payload={key: value for key, value in state.items() if key not in _EVENT_ENVELOPE},
        )


def _receipt(child: Run, *, adopted: bool) -> RestartReceipt:
    return RestartReceipt(
        run_id=child.run_id,
        parent_run_id=child.parent_run_id or child.root_run_id,
        restart_number=child.restart_number,
        adopted=adopted,
    )


def _branch_pair(entry: Sequence[str] | dict[str, str]) -> tuple[str, str]:
    if isinstance(entry, dict):
        pair: Sequence[object] = (
            entry.get("workflow_message_id", entry.get("workflowMessageId")),
            entry.get("pi_session_entry_id", entry.get("piSessionEntryId")),
        )
    elif isinstance(entry, (tuple, list)) and len(entry) == 2:
        pair = entry
    else:
        raise InvalidBranchEntryError()
    message_id, entry_id = pair
    if not isinstance(message_id, str) or not isinstance(entry_id, str) or not entry_id:
        raise InvalidBranchEntryError()
    return message_id, entry_id
