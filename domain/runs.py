"""The Run aggregate: one execution of a workflow, its status, lineage and follow-up slots."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any, ClassVar, Final
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.canonical import check_plain_json, json_digest, sha256hex
from runledger.domain.errors import (
    CancelledRunRestartError,
    ClaimLostError,
    EmptyPresentationInstructionsError,
    InvalidExecutionModeError,
    InvalidRunFieldError,
    InvalidRunIdError,
    InvalidRunStatusError,
    InvalidSessionIdError,
    InvalidUpdateFieldError,
    InvalidWorkflowNameError,
    LeaseNotCurrentError,
    LeaseOfAnotherRunError,
    NotOriginSessionError,
    PresentationInstructionsChangedError,
    RestartLimitError,
    RunAlreadyEndedError,
    RunHasNoOriginSessionError,
    RunNotAcceptingChangesError,
    RunOfAnotherSessionError,
    TooManyUpdatesError,
)
from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id
from runledger.domain.leases import check_authority_lease_ms, expiry, token_hash
from runledger.domain.records import RestartReceipt, RunClaim, RunRecord, UpdateRecord
from runledger.domain.values import (
    DEFAULT_PRESENTATION_INSTRUCTIONS,
    EXECUTION_MODES,
    PROGRESS_STATUSES,
    RESTART_LIMIT,
    TERMINAL_STATUSES,
    Actor,
    BadEndStatus,
    ExecutionMode,
    FenceReason,
    JsonValue,
    LineageKind,
    ProgressStatus,
    RunStatus,
    TerminalStatus,
    is_one_of,
)

RUN_ID_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")
MAX_CURRENT_UPDATES: Final = 1024


def run_aggregate_id(run_id: str) -> UUID:
    return aggregate_id("run", run_id)


def restarts_in_tree_key(root_run_id: str) -> str:
    """The index key under which every restart child of the tree rooted at a run is found."""
    return f"restarts-in-tree:{root_run_id}"


def check_run_id(run_id: object) -> str:
    """Upstream's run id shape: a letter or digit, then up to 199 of ``[A-Za-z0-9._-]``."""
    if not isinstance(run_id, str) or RUN_ID_PATTERN.fullmatch(run_id) is None:
        raise InvalidRunIdError(run_id)
    return run_id


def check_interruption_reason(reason: object) -> str:
    """An interruption is explained: its reason becomes the run's error."""
    if not isinstance(reason, str) or not reason.strip():
        raise InvalidRunFieldError(field="interruption reason", expected="a non-empty string")
    return reason


def _optional_text(name: str, value: object, expected: str = "a string or None") -> str | None:
    if value is not None and not isinstance(value, str):
        raise InvalidRunFieldError(field=name, expected=expected)
    return value


class Run(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """A workflow run. Follow-ups queue on it, so it serialises them and numbers them."""

    TOPIC = "run"
    DATETIME_FIELDS: ClassVar[tuple[str, ...]] = ("finished_at", "lease_expires_at")
    # Version 2 holds the human-decision receipt of a continuation child and the current
    # progress updates.
    class_version: ClassVar[int] = 2

    run_id: str
    workflow_name: str
    workflow_ref: str
    title: str | None
    input: JsonValue
    status: RunStatus
    paused: bool
    status_detail: str | None
    final_output: JsonValue
    error: str | None
    origin_session_id: str | None
    execution_mode: ExecutionMode | None
    parent_run_id: str | None
    root_run_id: str
    lineage_kind: LineageKind | None
    restart_number: int
    parent_terminal_fingerprint: str | None
    restart_child_id: str | None
    current_node: str | None
    current_attempt_id: str | None
    waiting_on: str | None
    presentation_instructions: str | None
    finished_at: datetime | None
    follow_up_count: int
    terminal_message_id: str | None
    terminal_fingerprint: str | None
    human_decision: dict[str, JsonValue] | None
    updates: dict[str, dict[str, Any]]
    """Current progress updates by (type, key), in sequence order; never mutated in place."""
    # The lease (decision 16). Class defaults: runs created, and snapshots taken, before
    # leases existed load as never claimed.
    lease_generation: int = 0
    lease_owner_type: str | None = None
    lease_owner_id: str | None = None
    lease_token_hash: str | None = None
    lease_expires_at: datetime | None = None

    def __init__(self) -> None:
        """State is set by the Created event."""

    @staticmethod
    def upcast_v1_v2(state: dict[str, Any]) -> None:
        """A snapshot taken before receipts and updates existed: none of either."""
        state["human_decision"] = None
        state["updates"] = {}

    class Event(LedgerEvent):
        """Base of every Run event."""

    class Created(Event, LedgerCreated):
        """A root run, or a continuation or restart child, was created."""

        TOPIC = "run.created"
        # Version 2 added ``human_decision``: the §3.7 receipt of a continuation child.
        class_version = 2
        workflow_name: str
        workflow_ref: str
        title: str | None
        input: JsonValue
        status: RunStatus
        parent_run_id: str | None
        root_run_id: str
        lineage_kind: LineageKind | None
        restart_number: int
        parent_terminal_fingerprint: str | None
        human_decision: dict[str, JsonValue] | None

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """Runs created before receipts existed came from no decision."""
            state["human_decision"] = None

        def lookup_key(self) -> str | None:
            # Upstream §3.8 rule 9 looks for a restart anywhere in the tree, and a run knows
            # its parent, not its children: the index is the way down.
            if self.lineage_kind == "restart":
                return restarts_in_tree_key(self.root_run_id)
            return None

        def apply(self, run: Run) -> None:
            run.run_id = self.run_id
            run.workflow_name = self.workflow_name
            run.workflow_ref = self.workflow_ref
            run.title = self.title
            run.input = self.input
            run.status = self.status
            run.paused = False
            run.status_detail = None
            run.final_output = None
            run.error = None
            run.origin_session_id = None
            run.execution_mode = None
            run.parent_run_id = self.parent_run_id
            run.root_run_id = self.root_run_id
            run.lineage_kind = self.lineage_kind
            run.restart_number = self.restart_number
            run.parent_terminal_fingerprint = self.parent_terminal_fingerprint
            run.restart_child_id = None
            run.current_node = None
            run.current_attempt_id = None
            run.waiting_on = None
            run.presentation_instructions = None
            run.finished_at = self.timestamp if self.status == "waiting" else None
            # Only the count: a run's follow-ups are found through the store's index, so
            # loading a run costs the same after 10 follow-ups as after 100,000.
            run.follow_up_count = 0
            run.terminal_message_id = None
            run.terminal_fingerprint = None
            run.human_decision = self.human_decision
            run.updates = {}

    class SessionBound(Event):
        """The run was bound to its origin Pi session and execution mode."""

        TOPIC = "run.session-bound"
        session_id: str
        execution_mode: ExecutionMode

        def apply(self, run: Run) -> None:
            run.origin_session_id = self.session_id
            run.execution_mode = self.execution_mode

    class Progressed(Event):
        """The run is running (at a node) or waiting (on a node)."""

        TOPIC = "run.progressed"
        status: ProgressStatus
        current_node: str | None
        current_attempt_id: str | None
        waiting_on: str | None
        status_detail: str | None

        def apply(self, run: Run) -> None:
            run.status = self.status
            run.current_node = self.current_node
            run.current_attempt_id = self.current_attempt_id
            run.waiting_on = self.waiting_on
            run.status_detail = self.status_detail
            # Upstream invariant: a waiting run has a finishedAt, a running one has none.
            run.finished_at = self.timestamp if self.status == "waiting" else None

    class Paused(Event):
        """The run was paused, with an optional status detail."""

        TOPIC = "run.paused"
        status_detail: str | None

        def apply(self, run: Run) -> None:
            run.paused = True
            run.status_detail = self.status_detail

    class Resumed(Event):
        """The run was resumed."""

        TOPIC = "run.resumed"

        def apply(self, run: Run) -> None:
            run.paused = False
            run.status_detail = None

    class PresentationInstructionsSet(Event):
        """How the run's terminal result is presented was set."""

        TOPIC = "run.presentation-instructions-set"
        instructions: str

        def apply(self, run: Run) -> None:
            run.presentation_instructions = self.instructions

    class FollowUpAccepted(Event):
        """The run accepted a follow-up and gave it the next order number."""

        TOPIC = "run.follow-up-accepted"
        follow_up_id: str
        order: int

        def apply(self, run: Run) -> None:
            run.follow_up_count = self.order

    class Finished(Event):
        """The run ended: completed, failed, timed out or cancelled."""

        TOPIC = "run.finished"
        status: TerminalStatus
        final_output: JsonValue
        error: str | None
        status_detail: str | None
        interrupted: bool
        terminal_message_id: str | None
        terminal_fingerprint: str

        def apply(self, run: Run) -> None:
            run.status = self.status
            run.final_output = self.final_output
            run.error = self.error
            run.status_detail = self.status_detail
            run.paused = False
            run.current_node = None
            run.current_attempt_id = None
            run.waiting_on = None
            run.finished_at = self.timestamp
            run.terminal_message_id = self.terminal_message_id
            run.terminal_fingerprint = self.terminal_fingerprint

    class RestartChildCreated(Event):
        """The ended run got its restart child."""

        TOPIC = "run.restart-child-created"
        child_run_id: str
        workflow_message_id: str
        workflow_turn_id: str

        def apply(self, run: Run) -> None:
            run.restart_child_id = self.child_run_id

    class ContinuationEnded(Event):
        """A continuation descendant ended badly while this run still took follow-ups."""

        TOPIC = "run.continuation-ended"
        continuation_run_id: str
        status: BadEndStatus

        def apply(self, run: Run) -> None:
            pass

    class Claimed(Event):
        """A worker took the run's lease; only the token's SHA-256 is recorded."""

        TOPIC = "run.claimed"
        owner_type: str
        owner_id: str
        generation: int
        token_hash: str
        lease_ms: int
        expires_at: str

        def apply(self, run: Run) -> None:
            run.lease_generation = self.generation
            run.lease_owner_type = self.owner_type
            run.lease_owner_id = self.owner_id
            run.lease_token_hash = self.token_hash
            run.lease_expires_at = datetime.fromisoformat(self.expires_at)

    class ClaimRenewed(Event):
        """The lease's holder extended it (explicitly, or by writing with its authority)."""

        TOPIC = "run.claim-renewed"
        generation: int
        expires_at: str

        def apply(self, run: Run) -> None:
            run.lease_expires_at = datetime.fromisoformat(self.expires_at)

    class ClaimReleased(Event):
        """The lease's holder gave it up; the generation stays, so old claims stay stale."""

        TOPIC = "run.claim-released"
        generation: int

        def apply(self, run: Run) -> None:
            run.lease_owner_type = None
            run.lease_owner_id = None
            run.lease_token_hash = None
            run.lease_expires_at = None

    class UpdatePublished(Event):
        """A progress update; the latest one per (type, key) is current (upstream §3.9)."""

        TOPIC = "run.update-published"
        update_id: str
        seq: int
        attempt_id: str
        update_type: str
        key: str
        data: JsonValue

        def apply(self, run: Run) -> None:
            slot = _update_slot(self.update_type, self.key)
            # Re-inserted at the end: the dict stays in sequence order.
            updates = {name: item for name, item in run.updates.items() if name != slot}
            updates[slot] = {
                "update_id": self.update_id,
                "seq": self.seq,
                "attempt_id": self.attempt_id,
                "update_type": self.update_type,
                "key": self.key,
                "data": self.data,
                "published_at": self.timestamp.isoformat(),
            }
            run.updates = updates

    class Snapshot(LedgerSnapshot):
        """The run's state at a version."""

        TOPIC = "run.snapshot"

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        run_id: str,
        *,
        workflow_name: object,
        input: JsonValue,
        workflow_ref: object,
        title: object,
        status: RunStatus,
        parent: Run | None,
        lineage_kind: LineageKind | None,
        parent_terminal_fingerprint: str | None,
        actor: Actor,
        now: datetime,
        human_decision: dict[str, JsonValue] | None = None,
    ) -> Run:
        """Start a root run, or a child of ``parent`` (continuation or restart).

        A continuation prepared from an accepted human decision carries its receipt.
        """
        if not isinstance(workflow_name, str) or not workflow_name.strip():
            raise InvalidWorkflowNameError()
        ref = _optional_text("workflow_ref", workflow_ref)
        check_plain_json(input, "input")
        if parent is None:
            root_run_id, restart_number = run_id, 0
        else:
            root_run_id = parent.root_run_id
            # A continuation inherits the restart number; a restart counts one more.
            restart_number = parent.restart_number + (1 if lineage_kind == "restart" else 0)
        return cls._create(
            cls.Created,
            id=run_aggregate_id(run_id),
            timestamp=now,
            actor=actor.to_json(),
            run_id=run_id,
            workflow_name=workflow_name,
            workflow_ref=ref if ref is not None else workflow_name,
            title=_optional_text("title", title),
            input=input,
            status=status,
            parent_run_id=None if parent is None else parent.run_id,
            root_run_id=root_run_id,
            lineage_kind=lineage_kind,
            restart_number=restart_number,
            parent_terminal_fingerprint=parent_terminal_fingerprint,
            human_decision=human_decision,
        )

    @classmethod
    def reserve_child(
        cls,
        child_id: str,
        *,
        parent: Run,
        lineage_kind: LineageKind,
        actor: Actor,
        now: datetime,
        parent_terminal_fingerprint: str | None = None,
        human_decision: dict[str, JsonValue] | None = None,
    ) -> Run:
        """A child no worker has started yet, as upstream's host queue reserves one (§3.8).

        It repeats the parent's workflow and input, is ``queued`` (it starts with
        ``record_progress(status="running")``) and has the parent's origin session.
        """
        child = cls.create(
            child_id,
            workflow_name=parent.workflow_name,
            input=parent.input,
            workflow_ref=parent.workflow_ref,
            title=parent.title,
            status="queued",
            parent=parent,
            lineage_kind=lineage_kind,
            parent_terminal_fingerprint=parent_terminal_fingerprint,
            actor=actor,
            now=now,
            human_decision=human_decision,
        )
        if parent.origin_session_id is not None and parent.execution_mode is not None:
            child.bind_origin_session(
                parent.origin_session_id, parent.execution_mode, actor=actor, now=now
            )
        return child

    def bind_origin_session(
        self, session_id: object, execution_mode: object, *, actor: Actor, now: datetime
    ) -> None:
        """Record the run's origin Pi session; the first binding wins for ever."""
        if not isinstance(session_id, str) or not session_id.strip():
            raise InvalidSessionIdError()
        if not is_one_of(execution_mode, EXECUTION_MODES):
            raise InvalidExecutionModeError()
        if self.origin_session_id is not None:
            return
        self._trigger(
            self.SessionBound, actor, now, session_id=session_id, execution_mode=execution_mode
        )

    def record_progress(
        self,
        *,
        status: object,
        current_node: object,
        current_attempt_id: object,
        waiting_on: object,
        status_detail: object,
        actor: Actor,
        now: datetime,
    ) -> None:
        """Move the run to running or waiting, keeping upstream's §3.4 field rules."""
        self.check_not_ended()
        if not is_one_of(status, PROGRESS_STATUSES):
            raise InvalidRunStatusError(status=status, allowed=", ".join(PROGRESS_STATUSES))
        node = _optional_text("current_node", current_node)
        attempt = _optional_text("current_attempt_id", current_attempt_id)
        waiting = _optional_text("waiting_on", waiting_on)
        detail = _optional_text("status_detail", status_detail)
        if status == "running":
            # A running run shows its node; it waits on nothing.
            waiting = None
        else:
            # A waiting run shows no current node; it waits on the active attempt's node,
            # or (no active attempt) on the node the caller names.
            waiting = node if node is not None else waiting
            node = None
        self._trigger(
            self.Progressed,
            actor,
            now,
            status=status,
            current_node=node,
            current_attempt_id=attempt,
            waiting_on=waiting,
            status_detail=detail,
        )

    def pause(self, *, status_detail: object, actor: Actor, now: datetime) -> None:
        """Pause the run (a flag beside its status); the same detail again adds nothing."""
        self.check_not_ended()
        detail = _optional_text("status_detail", status_detail)
        if self.paused and detail == self.status_detail:
            return
        self._trigger(self.Paused, actor, now, status_detail=detail)

    def resume(self, *, actor: Actor, now: datetime) -> None:
        """Clear the paused flag and its detail; a run that is not paused stays as it is."""
        self.check_not_ended()
        if not self.paused:
            return
        self._trigger(self.Resumed, actor, now)

    def set_presentation_instructions(
        self, instructions: object, *, actor: Actor, now: datetime
    ) -> None:
        """Store the instructions once; the same value again is adopted."""
        if not isinstance(instructions, str) or not instructions.strip():
            raise EmptyPresentationInstructionsError()
        if self.presentation_instructions is not None:
            if self.presentation_instructions != instructions:
                raise PresentationInstructionsChangedError()
            return
        self._trigger(self.PresentationInstructionsSet, actor, now, instructions=instructions)

    def accept_follow_up(self, follow_up_id: str, *, actor: Actor, now: datetime) -> int:
        """Give the next follow-up its order number (never reused)."""
        order = self.follow_up_count + 1
        self._trigger(self.FollowUpAccepted, actor, now, follow_up_id=follow_up_id, order=order)
        return order

    def publish_update(
        self,
        *,
        attempt_id: object,
        update_type: object,
        key: object,
        data: JsonValue,
        actor: Actor,
        now: datetime,
    ) -> UpdateRecord:
        """Publish a progress update; it replaces the current one of the same type and key."""
        for name, value in (("attempt ID", attempt_id), ("type", update_type), ("key", key)):
            if not isinstance(value, str) or not value:
                raise InvalidUpdateFieldError(field=name, expected="a non-empty string")
        check_plain_json(data, "data")
        slot = _update_slot(str(update_type), str(key))
        if slot not in self.updates and len(self.updates) >= MAX_CURRENT_UPDATES:
            raise TooManyUpdatesError(limit=MAX_CURRENT_UPDATES)
        seq = self.version + 1
        self._trigger(
            self.UpdatePublished,
            actor,
            now,
            update_id="update-" + sha256hex(f"{self.run_id}\0{seq}")[:40],
            seq=seq,
            attempt_id=attempt_id,
            update_type=update_type,
            key=key,
            data=data,
        )
        return self._update_record(self.updates[slot])

    def finish(
        self,
        *,
        status: TerminalStatus,
        final_output: JsonValue,
        error: str | None,
        status_detail: str | None,
        interrupted: bool,
        terminal_message_id: str | None,
        actor: Actor,
        now: datetime,
    ) -> None:
        """Record the run's end; ``domain.run_endings`` decides what else an end does."""
        self._trigger(
            self.Finished,
            actor,
            now,
            status=status,
            final_output=final_output,
            error=error,
            status_detail=status_detail,
            interrupted=interrupted,
            terminal_message_id=terminal_message_id,
            terminal_fingerprint=self.fingerprint_for(status, final_output, error, status_detail),
        )

    def record_restart_child(
        self,
        child_run_id: str,
        *,
        workflow_message_id: str,
        workflow_turn_id: str,
        actor: Actor,
        now: datetime,
    ) -> None:
        """Point the ended run at its one restart child (adopted by later restarts)."""
        self._trigger(
            self.RestartChildCreated,
            actor,
            now,
            child_run_id=child_run_id,
            workflow_message_id=workflow_message_id,
            workflow_turn_id=workflow_turn_id,
        )

    def record_continuation_ended(
        self, continuation_run_id: str, *, status: BadEndStatus, actor: Actor, now: datetime
    ) -> None:
        """Note on a run still taking follow-ups that a continuation descendant ended badly."""
        self._trigger(
            self.ContinuationEnded,
            actor,
            now,
            continuation_run_id=continuation_run_id,
            status=status,
        )

    # -- leases (upstream §3.10, §8.3; decisions 16, 22, 26) -------------------------------

    def claim(self, owner: Actor, *, token: str, lease_ms: int, now: datetime) -> RunClaim | None:
        """Take the lease unless a live one exists (anyone's, the same owner's too)."""
        if self.has_live_lease(now):
            return None
        expires_at = expiry(now, lease_ms)
        self._trigger(
            self.Claimed,
            owner,
            now,
            owner_type=owner.type,
            owner_id=owner.id,
            generation=self.lease_generation + 1,
            token_hash=token_hash(token),
            lease_ms=lease_ms,
            expires_at=expires_at.isoformat(),
        )
        return self._claim_for(token, lease_ms)

    def renew_claim(self, claim: RunClaim, *, lease_ms: int, now: datetime) -> RunClaim:
        """Extend the current, unexpired lease by ``lease_ms`` from now."""
        if self.lost_claim_reason(claim, now) is not None:
            raise LeaseNotCurrentError()
        self._renew(claim, lease_ms, now)
        return self._claim_for(claim.token, lease_ms)

    def release_claim(self, claim: RunClaim, *, now: datetime) -> None:
        """Give the lease up; the holder may release it after it expired (as upstream)."""
        if self.lease_owner_type is None or self._mismatch(claim) is not None:
            raise LeaseNotCurrentError()
        self._trigger(
            self.ClaimReleased,
            Actor.coerce({"type": claim.owner_type, "id": claim.owner_id}),
            now,
            generation=self.lease_generation,
        )

    def fence(self, authority: RunClaim | None, *, now: datetime) -> None:
        """The write-authority rule every fenced command calls first (upstream §3.10).

        A run nobody claimed takes writes without authority (single-host use). Otherwise,
        and whenever an authority is given (a stale claim is never silently accepted), the
        claim must be the live lease; the write then renews it by the claim's ``lease_ms``.
        """
        if self.lease_owner_type is None and authority is None:
            return
        if authority is None:
            raise ClaimLostError(reason="missingAuthority", run_id=self.run_id)
        if authority.run_id != self.run_id:
            raise LeaseOfAnotherRunError()
        reason = self.lost_claim_reason(authority, now)
        if reason is not None:
            raise ClaimLostError(reason=reason, run_id=self.run_id)
        self._renew(authority, check_authority_lease_ms(authority.lease_ms), now)

    def has_live_lease(self, now: datetime) -> bool:
        """Someone holds the lease and it has not run out."""
        return (
            self.lease_owner_type is not None
            and self.lease_expires_at is not None
            and self.lease_expires_at > now
        )

    def lost_claim_reason(self, claim: RunClaim, now: datetime) -> FenceReason | None:
        """Why ``claim`` is not the live lease, in upstream's order of checks; None if it is."""
        if not self.has_live_lease(now):
            return "expired"
        return self._mismatch(claim)

    def _mismatch(self, claim: RunClaim) -> FenceReason | None:
        if (claim.owner_type, claim.owner_id) != (self.lease_owner_type, self.lease_owner_id):
            return "ownerChanged"
        if token_hash(claim.token) != self.lease_token_hash:
            return "tokenChanged"
        if claim.generation != self.lease_generation:
            return "generationChanged"
        return None

    def _renew(self, claim: RunClaim, lease_ms: int, now: datetime) -> None:
        self._trigger(
            self.ClaimRenewed,
            Actor.coerce({"type": claim.owner_type, "id": claim.owner_id}),
            now,
            generation=self.lease_generation,
            expires_at=expiry(now, lease_ms).isoformat(),
        )

    def _claim_for(self, token: str, lease_ms: int) -> RunClaim:
        owner_type, owner_id = self.lease_owner_type, self.lease_owner_id
        expires_at = self.lease_expires_at
        if owner_type is None or owner_id is None or expires_at is None:
            raise LeaseNotCurrentError()
        return RunClaim(
            run_id=self.run_id,
            owner_type=owner_type,
            owner_id=owner_id,
            token=token,
            generation=self.lease_generation,
            expires_at=expires_at,
            lease_ms=lease_ms,
        )

    def _trigger(
        self, event_class: type[Run.Event], actor: Actor, now: datetime, **kwargs: Any
    ) -> None:
        self.trigger_event(
            event_class, timestamp=now, actor=actor.to_json(), run_id=self.run_id, **kwargs
        )

    # -- rules ----------------------------------------------------------------------------

    @property
    def has_ended(self) -> bool:
        """Completed, failed, timed out or cancelled: the run's outcome is fixed."""
        return self.status in TERMINAL_STATUSES

    def check_not_ended(self) -> None:
        """Decision 8: an ended run takes no progress, pause, resume or second end."""
        if self.has_ended:
            raise RunAlreadyEndedError(run_id=self.run_id, status=self.status)

    @property
    def continues_a_parent(self) -> bool:
        """The run continues a parent run: it is neither a root nor a restart."""
        return self.lineage_kind == "continuation" and self.parent_run_id is not None

    @property
    def accepts_changes(self) -> bool:
        """Upstream §3.1: only a running or waiting run takes follow-ups."""
        return self.status in PROGRESS_STATUSES

    def check_accepts_changes(self) -> None:
        """Upstream §4.2 step 6: ``Workflow run <id> does not accept changes with status <s>``."""
        if not self.accepts_changes:
            raise RunNotAcceptingChangesError(run_id=self.run_id, status=self.status)

    def check_accepts_follow_up_for(self, target_session_id: object) -> str:
        """Upstream §4.2 steps 6-7: the run takes changes, and only for its origin session."""
        self.check_accepts_changes()
        if self.origin_session_id is None or self.origin_session_id != target_session_id:
            raise NotOriginSessionError()
        return self.origin_session_id

    def required_origin_session(self) -> str:
        """The origin session that host messages go to (upstream §5.4 needs one)."""
        if self.origin_session_id is None:
            raise RunHasNoOriginSessionError(self.run_id)
        return self.origin_session_id

    def check_running(self) -> None:
        """Upstream ensureSettingsScope: only a running run creates settings scopes."""
        if self.status != "running":
            raise RunNotAcceptingChangesError(run_id=self.run_id, status=self.status)

    @staticmethod
    def check_finish_status(status: object) -> TerminalStatus:
        """A run finishes with one of the terminal statuses, named in upstream's order."""
        if not is_one_of(status, TERMINAL_STATUSES):
            raise InvalidRunStatusError(status=status, allowed=", ".join(TERMINAL_STATUSES))
        return status

    def check_finish(
        self, status: object, *, error: object, status_detail: object
    ) -> tuple[TerminalStatus, str | None, str | None]:
        """``finish_run``'s checks in order: the status, not ended yet, then the texts."""
        terminal = self.check_finish_status(status)
        self.check_not_ended()
        return (
            terminal,
            _optional_text("error", error, "text or None"),
            _optional_text("status_detail", status_detail, "text or None"),
        )

    @property
    def presents_terminal_message(self) -> bool:
        """Only interactive runs with an origin session get a terminal presentation message."""
        return self.origin_session_id is not None and self.execution_mode == "interactive"

    def check_restartable_by(self, session_id: object) -> None:
        """Upstream §3.8 rules 2-4, in order."""
        if self.origin_session_id is None or self.origin_session_id != session_id:
            raise RunOfAnotherSessionError()
        if self.execution_mode != "interactive":
            raise RunOfAnotherSessionError()
        if self.status == "cancelled":
            raise CancelledRunRestartError()
        if self.restart_number >= RESTART_LIMIT:
            raise RestartLimitError(limit=RESTART_LIMIT)

    def fingerprint_for(
        self,
        status: str,
        final_output: JsonValue,
        error: str | None,
        status_detail: str | None,
    ) -> str:
        """Upstream's terminalFingerprint: what makes two terminal outcomes the same."""
        return json_digest(
            {
                "workflowRef": self.workflow_ref,
                "input": self.input,
                "status": status,
                "finalOutput": final_output,
                "error": error,
                "reason": status_detail,
            }
        )

    def outcome(self) -> dict[str, JsonValue]:
        """This run's entry in a descendant's ``earlierOutcomes``."""
        return {
            "runId": self.run_id,
            "status": self.status,
            "reason": self.status_detail,
            "finalOutput": self.final_output,
            "error": self.error,
        }

    def terminal_facts(self, earlier: list[Run]) -> dict[str, JsonValue]:
        """Upstream §5.6 terminal facts of this (ended) run; ``earlier`` oldest first."""
        return {
            "schema": "pi-workflows.terminal-result.v1",
            "runId": self.run_id,
            "workflowName": self.workflow_name,
            "workflowRef": self.workflow_ref,
            "input": self.input,
            "status": self.status,
            "finalOutput": self.final_output,
            "error": self.error,
            "reason": self.status_detail,
            "restartNumber": self.restart_number,
            "earlierOutcomes": [run.outcome() for run in earlier if run.has_ended],
        }

    def _update_record(self, item: dict[str, Any]) -> UpdateRecord:
        return UpdateRecord(
            update_id=item["update_id"],
            run_id=self.run_id,
            attempt_id=item["attempt_id"],
            update_type=item["update_type"],
            key=item["key"],
            data=item["data"],
            seq=item["seq"],
            published_at=datetime.fromisoformat(item["published_at"]),
        )

    @property
    def effective_presentation_instructions(self) -> str:
        """The instructions set on the run, else upstream's default."""
        return self.presentation_instructions or DEFAULT_PRESENTATION_INSTRUCTIONS

    def to_restart_receipt(self, *, adopted: bool) -> RestartReceipt:
        """This restart child as ``restart_run`` reports it."""
        return RestartReceipt(
            run_id=self.run_id,
            parent_run_id=self.parent_run_id or self.root_run_id,
            restart_number=self.restart_number,
            adopted=adopted,
        )

    def to_record(self) -> RunRecord:
        """The run as ``get_run`` returns it."""
        return RunRecord(
            run_id=self.run_id,
            workflow_name=self.workflow_name,
            workflow_ref=self.workflow_ref,
            title=self.title,
            status=self.status,
            paused=self.paused,
            status_detail=self.status_detail,
            input=self.input,
            final_output=self.final_output,
            error=self.error,
            origin_session_id=self.origin_session_id,
            execution_mode=self.execution_mode,
            parent_run_id=self.parent_run_id,
            root_run_id=self.root_run_id,
            lineage_kind=self.lineage_kind,
            restart_number=self.restart_number,
            parent_terminal_fingerprint=self.parent_terminal_fingerprint,
            current_node=self.current_node,
            current_attempt_id=self.current_attempt_id,
            waiting_on=self.waiting_on,
            presentation_instructions=self.presentation_instructions,
            created_at=self.created_on,
            updated_at=self.modified_on,
            finished_at=self.finished_at,
            human_decision=self.human_decision,
            updates=[self._update_record(item) for item in self.updates.values()],
        )


def _update_slot(update_type: str, key: str) -> str:
    return f"{update_type}\0{key}"
