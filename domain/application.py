"""The application service: every command and consistent read of the workflow domain.

A command loads what it needs into a unit of work, checks upstream's rules in upstream's
order, and saves every aggregate it changed in one atomic ``save``. Two commands that touch
the same aggregate conflict on its version; the loser reloads and runs again, so nothing
acknowledged is lost and nothing is applied twice.
"""

from __future__ import annotations

import copy
import itertools
import random
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
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

from runledger.domain import lineage, outbox, restarts, run_endings, settings_changes
from runledger.domain.aggregates import Aggregates
from runledger.domain.effects import (
    Effect,
    check_label,
    check_outcome,
    effect_aggregate_id,
    effect_id_for,
    effects_of_run_key,
)
from runledger.domain.effects import (
    check_request as check_effect_request,
)
from runledger.domain.errors import (
    ConcurrencyError,
    CorruptEventError,
    DecisionNotFoundError,
    DecisionRunMissingError,
    InvalidPageError,
    RunNotFoundError,
    SettingsKeptChangingError,
    WorkflowError,
)
from runledger.domain.follow_ups import (
    FollowUp,
    check_prompt,
    check_request_id,
    check_source,
    follow_up_aggregate_id,
    follow_ups_of_run_key,
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
from runledger.domain.ports import EventStorage, Fence, IndexFence, SameCommit, VersionFence
from runledger.domain.records import (
    DecisionSubmission,
    EffectRecord,
    EffectReservation,
    FollowUpRecord,
    HumanDecisionRecord,
    LoggedEvent,
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
from runledger.domain.runs import (
    Run,
    check_interruption_reason,
    check_run_id,
    restarts_in_tree_key,
    run_aggregate_id,
)
from runledger.domain.serialisation import LedgerMapper
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
from runledger.domain.settings_scopes import SettingsScope, settings_of_run_key
from runledger.domain.turn_reservations import TurnReservation, check_turn_id, turn_aggregate_id
from runledger.domain.values import (
    HOST,
    INTERRUPTED_REASON,
    SYSTEM,
    Actor,
    ExecutionMode,
    HostMessageKind,
    JsonValue,
    MessageKind,
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
    source_lookup_keys,
)

Clock = Callable[[], datetime]
SameCommitFactory = Callable[[], AbstractContextManager[SameCommit | None]]
A = TypeVar("A", bound=BaseAggregate[UUID])
E = TypeVar("E")
T = TypeVar("T")

_EVENT_ENVELOPE: Final = frozenset(
    {"originator_id", "originator_version", "timestamp", "originator_topic", "actor"}
)


HOT_SECONDS: Final = 2.0
"""How long after a conflict a command reads an aggregate rather than trust its cached copy."""
MAX_HOT_AGGREGATES: Final = 1000


def utc_now() -> datetime:
    return datetime.now(UTC)


class UnitOfWork(Aggregates):
    """The aggregates one attempt of a command has loaded or created, loaded at most once.

    A ``trusting`` unit (a command's first attempt) takes an aggregate this process has seen
    from the cache without reading the store; one that may ``assume_new`` takes an aggregate
    it has never seen as new where the command would create it (``get_or_assume_new``).
    Either guess, if wrong, makes the save conflict on the store's unique keys; ``assumed``
    tells the application that an answer or an error of this attempt may rest on one, so it
    runs the command again, reading.
    """

    def __init__(
        self, app: WorkflowRuns, now: datetime, *, trusting: bool = False, assume_new: bool = False
    ) -> None:
        self.app = app
        self.now = now
        self.trusting = trusting
        self.assume_new = assume_new
        self.assumed = False
        self._aggregates: dict[UUID, BaseAggregate[UUID] | None] = {}
        self._version_fences: dict[UUID, VersionFence] = {}
        self._index_fences: dict[str, IndexFence] = {}

    def get(self, cls: type[A], aggregate_id: UUID) -> A | None:
        if aggregate_id not in self._aggregates:
            cached = self.app.cached(aggregate_id) if self.trusting else None
            if cached is not None:
                self.assumed = True
                self._aggregates[aggregate_id] = cached
            else:
                self._aggregates[aggregate_id] = self.app.load(cls, aggregate_id)
        aggregate = self._aggregates[aggregate_id]
        return aggregate if isinstance(aggregate, cls) else None

    def get_or_assume_new(self, cls: type[A], aggregate_id: UUID) -> A | None:
        if (
            self.assume_new
            and aggregate_id not in self._aggregates
            and not self.app.has_seen(aggregate_id)
        ):
            self.assumed = True
            self._aggregates[aggregate_id] = None
            return None
        return self.get(cls, aggregate_id)

    def add(self, aggregate: A) -> A:
        # Re-insert so a new aggregate's events follow those of aggregates touched earlier
        # (the log then reads: run accepts, follow-up queued, message created).
        self._aggregates.pop(aggregate.id, None)
        self._aggregates[aggregate.id] = aggregate
        return aggregate

    def changed(self) -> list[BaseAggregate[UUID]]:
        return [a for a in self._aggregates.values() if a is not None and a.pending_events]

    def fenced_run(self, run_id: object, authority: RunClaim | None) -> Run:
        """The run, once its write authority holds (``Run.fence``), also at the commit: the
        save carries a fence, so a claim committed after the version read here refuses it and
        the command runs again, reading (decision 27). A write that changes the run needs no
        fence: its versions conflict with the claim's."""
        run = self.run(run_id)
        self._hold(run, Run.Claimed.TOPIC)
        run.fence(authority, now=self.now)
        return run

    def guard_settings_of(self, run: Run) -> None:
        # Held shared to the commit: a continuation child's creation holds the run
        # exclusively while it checks that it saw every scope (``settings_scopes_active_on``).
        self._hold(run)

    def _hold(self, aggregate: BaseAggregate[UUID], *topics: str) -> None:
        """Fence the aggregate at the version first read (``VersionFence``)."""
        held = self._version_fences.get(aggregate.id)
        version = aggregate.version if held is None else held.version
        known = () if held is None else held.topics
        merged = tuple(dict.fromkeys((*known, *topics)))
        self._version_fences[aggregate.id] = VersionFence(aggregate.id, version, merged)

    def fences(self, changed: Sequence[BaseAggregate[UUID]]) -> list[Fence]:
        """The fences for the save to check: of the aggregates read but not changed (a
        change conflicts on its versions anyway) and of the indexes read to completion."""
        written = {aggregate.id for aggregate in changed}
        held = [f for key, f in self._version_fences.items() if key not in written]
        return [*held, *self._index_fences.values()]

    def follow_ups_of(self, run_id: str) -> Iterator[FollowUp]:
        return self._indexed(FollowUp, follow_ups_of_run_key(run_id))

    def messages_of_source(self, source_id: str) -> Iterator[WorkflowMessage]:
        # Looked up again on every attempt, so a retry also sees messages created since. A
        # digest key may also be some other source's id: only this source's messages count.
        for key in source_lookup_keys(source_id):
            for message in self._indexed(WorkflowMessage, key):
                if message.source_id == source_id:
                    yield message

    def effects_of(self, run_id: str) -> Iterator[Effect]:
        return self._indexed(Effect, effects_of_run_key(run_id))

    def restarts_in_tree(self, root_run_id: str) -> Iterator[Run]:
        return self._indexed(Run, restarts_in_tree_key(root_run_id))

    def settings_scopes_active_on(self, run_id: str) -> Iterator[SettingsScope]:
        # The index lists every scope that ever became active on the run; some moved on.
        # Read to completion: the save is refused if a scope joined it meanwhile (a scope
        # created on the run holds it, ``guard_settings_of``), and the command runs again.
        key = settings_of_run_key(run_id)
        seen = self.app.storage.originator_ids_by_key(key)
        self._index_fences[key] = IndexFence(key, frozenset(seen), run_aggregate_id(run_id))
        scopes = (self.get(SettingsScope, aggregate_id) for aggregate_id in seen)
        return (s for s in scopes if s is not None and s.active_run_id == run_id)

    def _indexed(self, cls: type[A], lookup_key: str) -> Iterator[A]:
        for aggregate_id in self.app.storage.originator_ids_by_key(lookup_key):
            found = self.get(cls, aggregate_id)
            if found is not None:
                yield found


class WorkflowRuns(Application[UUID]):
    """Runs, their lineage, follow-ups and the workflow-message outbox, event-sourced."""

    name = "runledger"
    snapshotting_intervals: ClassVar[
        dict[type[MutableAggregateProtocol[Any]] | type[ImmutableAggregateProtocol[Any]], int]
    ] = {Run: 100, SessionSegment: 100}
    max_attempts: ClassVar[int] = 50

    def __init__(
        self,
        storage: EventStorage,
        *,
        clock: Clock = utc_now,
        env: dict[str, str] | None = None,
        on_commit: Callable[[], None] | None = None,
        same_commit: SameCommitFactory | None = None,
        allow_host_session_recording: bool = False,
    ) -> None:
        """``on_commit`` runs after each command that saved something (the embedded read
        models catch up there), in place of the library's private notification hook.
        ``same_commit`` gives, per save, the step that writes the read models in the events'
        transaction (or None when it cannot now). ``allow_host_session_recording`` lets
        session recording skip the run's write authority (upstream 0.16.2: the host records
        after the worker's lease ended)."""
        self.storage = storage
        self.allow_host_session_recording = allow_host_session_recording
        self.clock = clock
        self._on_commit = on_commit
        self._same_commit = same_commit
        self._conflicted_at: dict[UUID, float] = {}
        self.conflicts = 0
        """Version conflicts so far that made a command run again (a measure of contention)."""
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

    def has_seen(self, aggregate_id: UUID) -> bool:
        """Whether the aggregate is in this process's cache (so it exists in the store)."""
        cache = self.repository.cache
        return cache is not None and aggregate_id in cache.cache

    def cached(self, aggregate_id: UUID) -> BaseAggregate[UUID] | None:
        """A copy of the aggregate as this process last saved or loaded it, without reading
        the store; None when it is not cached, or conflicted lately (other writers change
        it, so the cached version would only cost an insert that fails)."""
        cache = self.repository.cache
        if cache is None:
            return None
        conflicted = self._conflicted_at.get(aggregate_id)
        if conflicted is not None and time.monotonic() - conflicted < HOT_SECONDS:
            return None
        try:
            aggregate = cache.get(aggregate_id)
        except KeyError:
            return None
        if not isinstance(aggregate, BaseAggregate):
            return None
        # Commands change what they load; the cached one must stay as it was stored.
        return copy.deepcopy(aggregate)

    def load(self, cls: type[A], aggregate_id: UUID) -> A | None:
        try:
            aggregate: BaseAggregate[UUID] = self.repository.get(aggregate_id)
        except AggregateNotFoundError:
            return None
        if not isinstance(aggregate, cls):
            # Ids are derived per kind of aggregate, so another kind under this id means the
            # stored rows were changed; answering "not found" would hide them.
            raise CorruptEventError(
                f"it replays to a {type(aggregate).__name__}, not a {cls.__name__}",
                wire_name=None,
                aggregate_id=aggregate_id,
                version=aggregate.version,
            )
        return aggregate

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
        """Run ``command`` and save what it changed, retrying on a version conflict.

        The first attempt is optimistic (no lock, one round trip). After a conflict, the
        command runs again holding every aggregate it changed so far, so the writers of a hot
        run take turns instead of retrying without bound; the version check stays the guard.
        At most ``attempts`` times (default ``max_attempts``), then ``exhausted()`` is raised.
        """
        contended: list[UUID] = []
        trusting = assume_new = True
        conflicted = False
        for attempt in range(self.max_attempts if attempts is None else attempts):
            changed: list[BaseAggregate[UUID]] = []
            try:
                with self.storage.lock_aggregates(contended, conflicted=conflicted):
                    unit = UnitOfWork(self, self.now(), trusting=trusting, assume_new=assume_new)
                    try:
                        result = command(unit)
                    except WorkflowError:
                        if not unit.assumed:
                            raise
                        # The error may come from what the cache said: ask the store.
                        trusting = assume_new = False
                        continue
                    changed = unit.changed()
                    if not changed and unit.assumed:
                        # An answer that writes nothing is not checked by a save's keys.
                        trusting = assume_new = False
                        continue
                    hot = [] if contended else self._hot([a.id for a in changed])
                    if hot:
                        # Other writers keep changing these: an optimistic save would most
                        # likely conflict, so run again holding them from the start instead.
                        contended = hot
                        trusting = False
                        changed = []
                        continue
                    if changed:
                        self._save(changed, unit.fences(changed))
            except IntegrityError:
                self.conflicts += 1
                conflicted = True
                trusting = assume_new = False
                contended = sorted({*contended, *(aggregate.id for aggregate in changed)})
                self._note_conflict(contended)
                # Jittered, so two losers that do not hold their aggregates yet do not
                # collide again straight away.
                time.sleep(random.uniform(0, 0.001 * (attempt + 1)))  # noqa: S311
                continue
            if changed and self._on_commit is not None:
                self._on_commit()
            return result
        raise exhausted()

    def _hot(self, aggregate_ids: Iterable[UUID]) -> list[UUID]:
        """The aggregates among these that conflicted lately, in the fixed (sorted) order."""
        now = time.monotonic()
        noted = self._conflicted_at
        return sorted(
            i for i in aggregate_ids if (at := noted.get(i)) is not None and now - at < HOT_SECONDS
        )

    def _note_conflict(self, aggregate_ids: Iterable[UUID]) -> None:
        now = time.monotonic()
        if len(self._conflicted_at) > MAX_HOT_AGGREGATES:
            # A copy (taken at once under the GIL): other threads may note conflicts meanwhile.
            noted = dict(self._conflicted_at)
            self._conflicted_at = {key: at for key, at in noted.items() if now - at < HOT_SECONDS}
        for aggregate_id in aggregate_ids:
            self._conflicted_at[aggregate_id] = now

    def _save(
        self, aggregates: Sequence[BaseAggregate[UUID]], fences: Sequence[Fence] = ()
    ) -> None:
        """Insert the aggregates' new events in one transaction (with the read models where
        ``same_commit`` gives a step, refused while a fence is broken), then cache the
        aggregates and take due snapshots.

        In place of the library's ``save``: the events are mapped once, and nothing is read
        back; the cache is updated only after the commit, so it never holds what the store
        refused.
        """
        # The library's ``ProcessingEvent.collect_events`` checks each object against its
        # runtime protocols, which cost more than the rest of the collection.
        events = [event for aggregate in aggregates for event in aggregate.collect_events()]
        stored = [self.mapper.to_stored_event(event) for event in events]
        if self._same_commit is None:
            self.recorder.insert_events(stored, fences=fences)
        else:
            with self._same_commit() as step:
                self.recorder.insert_events(stored, same_commit=step, fences=fences)
        cache = self.repository.cache
        if cache is not None:
            for aggregate in aggregates:
                cache.put(aggregate.id, aggregate)
        self._take_due_snapshots(aggregates, events)

    def _take_due_snapshots(
        self, aggregates: Sequence[BaseAggregate[UUID]], events: Sequence[Any]
    ) -> None:
        """Snapshot an aggregate whose event reached its interval, from the aggregate in
        hand when it is at that version (the library would replay it from the store)."""
        if self.snapshots is None:
            return
        saved = {aggregate.id: aggregate for aggregate in aggregates}
        for event in events:
            aggregate = saved[event.originator_id]
            interval = self.snapshotting_intervals.get(type(aggregate))
            if interval is None or event.originator_version % interval:
                continue
            snapshot_class = getattr(type(aggregate), "Snapshot", None)
            if snapshot_class is not None and aggregate.version == event.originator_version:
                self.snapshots.put([snapshot_class.take(aggregate)])
            else:
                self.take_snapshot(event.originator_id, version=event.originator_version)

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

        def command(unit: UnitOfWork) -> RunRecord:
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

        def command(unit: UnitOfWork) -> RunRecord:
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

        def command(unit: UnitOfWork) -> RunRecord:
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

        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run.pause(status_detail=status_detail, actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def resume_run(self, run_id: str, *, authority: RunClaim | None = None) -> RunRecord:
        """Resume a paused run."""
        claim = check_authority(authority)

        def command(unit: UnitOfWork) -> RunRecord:
            run = unit.fenced_run(run_id, claim)
            run.resume(actor=HOST, now=unit.now)
            return run.to_record()

        return self.execute(command)

    def set_presentation_instructions(
        self, run_id: str, instructions: str, *, authority: RunClaim | None = None
    ) -> RunRecord:
        """Set how the run's terminal result is presented; they cannot change once set."""
        claim = check_authority(authority)

        def command(unit: UnitOfWork) -> RunRecord:
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

        def command(unit: UnitOfWork) -> UpdateRecord:
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

        def command(unit: UnitOfWork) -> RunRecord:
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

        def command(unit: UnitOfWork) -> RunRecord:
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

        def command(unit: UnitOfWork) -> RestartReceipt:
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

        def command(unit: UnitOfWork) -> QueuedFollowUp:
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

        def command(unit: UnitOfWork) -> FollowUpRecord:
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

        def command(unit: UnitOfWork) -> WorkflowMessageRecord:
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

    def cancel_pending_for_source(self, source_id: str, *, kind: MessageKind | None = None) -> int:
        """Cancel every pending message of a source (and kind); returns how many."""

        def command(unit: UnitOfWork) -> int:
            return outbox.cancel_pending_for_source(
                unit, source_id, kind=kind, actor=HOST, now=unit.now
            )

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

        def command(unit: UnitOfWork) -> list[WorkflowMessageRecord]:
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

        def command(unit: UnitOfWork) -> TurnRecord:
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

        def command(unit: UnitOfWork) -> SettingsScopeRecord:
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

        def command(unit: UnitOfWork) -> SettingsChange:
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

        def command(unit: UnitOfWork) -> HumanDecisionRecord:
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

        def command(unit: UnitOfWork) -> DecisionSubmission:
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

        def command(unit: UnitOfWork) -> HumanDecisionRecord:
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

        def command(unit: UnitOfWork) -> HumanDecisionRecord:
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

        def command(unit: UnitOfWork) -> RunRecord:
            decision = self._decision(unit, decision_id)
            return lineage.continue_after_decision(unit, decision, run_id, now=unit.now).to_record()

        return self.execute(command)

    def get_human_decision(self, decision_id: str) -> HumanDecisionRecord | None:
        if not is_decision_id(looked_up_id("decision_id", decision_id)):
            return None
        decision = self.load(HumanDecision, decision_aggregate_id(decision_id))
        return None if decision is None else decision.to_record()

    @staticmethod
    def _decision(unit: UnitOfWork, decision_id: object) -> HumanDecision:
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

        def command(unit: UnitOfWork) -> RunClaim | None:
            run = unit.run(run_id)
            return run.claim(owner, token=token, lease_ms=duration, now=unit.now)

        return self.execute(command)

    def renew_claim(self, claim: RunClaim, *, lease_ms: int = DEFAULT_LEASE_MS) -> RunClaim:
        """Extend the current, unexpired lease; otherwise ``Lease is no longer current``."""
        current = check_claim(claim)
        duration = check_lease_ms(lease_ms)

        def command(unit: UnitOfWork) -> RunClaim:
            run = unit.run(current.run_id)
            return run.renew_claim(current, lease_ms=duration, now=unit.now)

        return self.execute(command)

    def release_claim(self, claim: RunClaim) -> None:
        """Give the lease up (also after it expired); a claim that is not current is refused."""
        current = check_claim(claim)

        def command(unit: UnitOfWork) -> None:
            run = unit.run(current.run_id)
            run.release_claim(current, now=unit.now)

        self.execute(command)

    # -- session recording (upstream §3.12; decisions 21, 26) -----------------------------

    def fence_session_write(self, unit: UnitOfWork, run_id: str, claim: RunClaim | None) -> Run:
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

        def command(unit: UnitOfWork) -> SessionSegmentRecord:
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

        def command(unit: UnitOfWork) -> int:
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

        def command(unit: UnitOfWork) -> SessionSegmentRecord:
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

        def command(unit: UnitOfWork) -> SessionSegmentRecord:
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
            for aggregate_id in self.storage.originator_ids_by_key(segments_of_run_key(run_id))
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

        def command(unit: UnitOfWork) -> EffectReservation:
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

        def command(unit: UnitOfWork) -> EffectRecord:
            effect = unit.effect(effect_id)
            unit.fenced_run(effect.run_id, claim)
            effect.settle(attempt=attempt, outcome=settled, result=result, actor=HOST, now=unit.now)
            return effect.to_record()

        return self.execute(command)

    def recover_applying_effects(self, run_id: str) -> RecoveryVerdict:
        """After a crash: idempotent applying effects become retry_ready, manual ones
        ambiguous; ``"ambiguous"`` if any became ambiguous, else ``"safe"``."""

        def command(unit: UnitOfWork) -> RecoveryVerdict:
            unit.run(run_id)
            ambiguous = [e.recover(actor=SYSTEM, now=unit.now) for e in unit.effects_of(run_id)]
            return "ambiguous" if any(ambiguous) else "safe"

        return self.execute(command)

    def retry_effect(self, effect_id: str) -> EffectRecord:
        """Let a failed or ambiguous effect be attempted again by the next reservation."""

        def command(unit: UnitOfWork) -> EffectRecord:
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
        looked_up_id("run_id", run_id)
        run = self.load(Run, run_aggregate_id(run_id))
        return None if run is None else run.to_record()

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

    def event_log(
        self, *, after: int = 0, limit: int = 1000, run_id: str | None = None
    ) -> list[LoggedEvent]:
        """Stored events in log order; with ``run_id`` only that run's and its children's."""
        _page_bound("log position", after)
        _page_bound("log limit", limit)
        if run_id is not None:
            check_run_id(run_id)
        notifications = self.storage.select_log(after=after, limit=limit, run_id=run_id)
        return [self.logged_event(notification) for notification in notifications]

    def logged_event(self, notification: Notification) -> LoggedEvent:
        """One stored event as ``event_log`` returns it."""
        event = self.mapper.to_domain_event(notification)
        state = vars(event)
        actor = state["actor"]  # checked by the mapper: {type, id}
        return LoggedEvent(
            position=notification.id,
            wire_name=notification.topic,
            aggregate_id=str(notification.originator_id),
            version=notification.originator_version,
            recorded_at=state["timestamp"],
            actor=SYSTEM if not actor else Actor.from_json(actor),
            payload={key: value for key, value in state.items() if key not in _EVENT_ENVELOPE},
        )


def _page(items: Iterable[T], start: object, limit: object) -> list[T]:
    """Items ``start`` to ``start + limit`` of an ordered stream (both non-negative)."""
    first = _page_bound("page start", start)
    # Both may be as large as MAX_COUNT, whose sum no islice takes; no stream is that long.
    stop = min(first + _page_bound("page limit", limit), sys.maxsize)
    return list(itertools.islice(items, first, stop))


def _page_bound(name: str, value: object) -> int:
    if not is_count(value):
        raise InvalidPageError(name)
    return value
