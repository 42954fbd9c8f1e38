"""The frozen records commands and queries return (DESIGN.md "Records")."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict

from runledger.domain.values import (
    Actor,
    CaptureStatus,
    DecisionProvenance,
    DecisionStatus,
    EffectOutcome,
    EffectRecovery,
    EffectStatus,
    ExecutionMode,
    FollowUpState,
    Integrity,
    JsonValue,
    LineageKind,
    MessageKind,
    MessageStatus,
    ReservationOutcome,
    RunStatus,
    StopReason,
    SubmissionOutcome,
    TerminalStatus,
    TurnState,
    ViewerTargetType,
)


class Record(BaseModel):
    """A frozen pydantic record: read-only, and no field beyond those declared."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def trusted(cls, **values: Any) -> Self:
        """The record of values already checked (rows a projection wrote from checked
        events), every field given: what ``model_construct`` makes of them, at a fifth of
        its cost (4.3 -> 0.8 us a follow-up record, which was most of a 256-item page read),
        since it neither validates nor looks for defaults, aliases or extras."""
        if values.keys() != cls.__pydantic_fields__.keys():
            missing = sorted(cls.__pydantic_fields__.keys() - values.keys())
            unknown = sorted(values.keys() - cls.__pydantic_fields__.keys())
            raise TypeError(f"{cls.__name__}: missing {missing}, unknown {unknown}")
        record = cls.__new__(cls)
        object.__setattr__(record, "__dict__", values)
        object.__setattr__(record, "__pydantic_fields_set__", set(values))
        object.__setattr__(record, "__pydantic_extra__", None)
        object.__setattr__(record, "__pydantic_private__", None)
        return record


class UpdateRecord(Record):
    """One progress update (upstream §3.9 ``publishUpdate``)."""

    update_id: str
    run_id: str
    attempt_id: str
    update_type: str
    key: str
    data: JsonValue
    seq: int
    published_at: datetime


class RunRecord(Record):
    """A run: workflow, input, status, paused, outcome, origin session, lineage, current node."""

    run_id: str
    workflow_name: str
    workflow_ref: str
    title: str | None
    status: RunStatus
    paused: bool
    status_detail: str | None
    input: JsonValue
    final_output: JsonValue
    error: str | None
    origin_session_id: str | None
    execution_mode: ExecutionMode | None
    parent_run_id: str | None
    root_run_id: str
    lineage_kind: LineageKind | None
    restart_number: int
    parent_terminal_fingerprint: str | None
    current_node: str | None
    current_attempt_id: str | None
    waiting_on: str | None
    presentation_instructions: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    human_decision: dict[str, Any] | None = None
    """The §3.7 receipt of the decision this continuation child was created from."""
    updates: list[UpdateRecord] = []
    """The current progress updates (latest per type and key), by sequence."""


class FollowUpRecord(Record):
    """A follow-up: run, request id, order, target session, actor, source, prompt, state."""

    follow_up_id: str
    run_id: str
    request_id: str
    order: int
    target_session_id: str
    actor: Actor
    source: str
    prompt: str
    state: FollowUpState
    reason: str | None
    created_at: datetime
    updated_at: datetime
    delivery: MessageStatus | None = None
    """Status of the follow-up's latest message; set by the queue read model only."""


class QueuedFollowUp(Record):
    """What ``queue_follow_up`` returns: the follow-up, and whether an earlier one was adopted."""

    follow_up: FollowUpRecord
    adopted: bool


class FollowUpQueue(Record):
    """A run's follow-up queue: every follow-up of the run, any state, by order."""

    run_id: str
    origin_session_id: str
    follow_ups: list[FollowUpRecord]


class WorkflowMessageRecord(Record):
    """A workflow message: run, target session, kind, source id, content, status, entry id."""

    workflow_message_id: str
    run_id: str
    target_session_id: str
    kind: MessageKind
    source_id: str
    content: dict[str, Any]
    content_digest: str
    status: MessageStatus
    pi_session_entry_id: str | None
    created_at: datetime
    updated_at: datetime
    order: int | None = None
    """Session-wide order; set by the outbox read model, None from get_workflow_message."""


class TurnRecord(Record):
    """A model turn a sent message triggered: its state, stop reason and response entry."""

    workflow_turn_id: str
    workflow_message_id: str
    run_id: str
    target_session_id: str
    state: TurnState
    stop_reason: StopReason | None
    response_session_entry_id: str | None
    started_at: datetime
    ended_at: datetime | None


class RestartReceipt(Record):
    """What ``restart_run`` returns: the restart child, its parent and restart number."""

    run_id: str
    parent_run_id: str
    restart_number: int
    adopted: bool


class TerminalData(Record):
    """An ended run's terminal data (upstream §6)."""

    run_id: str
    status: TerminalStatus
    status_detail: str | None
    input: JsonValue
    final_output: JsonValue
    error: str | None
    presentation_instructions: str
    restart_number: int


class ViewerDelta(Record):
    """One JSON-patch delta of a run's viewer at a presentation revision."""

    run_id: str
    presentation_revision: int
    delta_index: int
    target_type: ViewerTargetType
    target_key: str
    patch: list[dict[str, Any]]
    recorded_at: datetime


class ViewerDeltas(Record):
    """The viewer deltas after a cursor, when they are still retained."""

    kind: Literal["deltas"] = "deltas"
    current_revision: int
    retained_from_revision: int
    deltas: list[ViewerDelta]


class SnapshotRequired(Record):
    """The viewer's cursor is older than the retained deltas: read a snapshot instead."""

    kind: Literal["snapshot_required"] = "snapshot_required"
    current_revision: int
    retained_from_revision: int


class LoggedEvent(Record):
    """A stored event in log order: position, wire name, aggregate, version, actor, payload."""

    position: int
    wire_name: str
    aggregate_id: str
    version: int
    recorded_at: datetime
    actor: Actor
    payload: dict[str, Any]


class ProjectionStatus(Record):
    """A projection's code version, its active slot's position and lag, and its versions."""

    name: str
    version: int
    """The version this code builds."""
    position: int
    """The active slot's log position."""
    lag: int
    active_version: int | None = None
    """The version answering queries (None before the first build)."""
    building_version: int | None = None
    """The version a blue/green rebuild is building beside it, if any."""
    building_position: int | None = None
    last_error: str | None = None


class SubmissionRecord(Record):
    """One answer submitted to a human decision, and what it achieved."""

    submission_id: str
    actor: Actor
    answer_digest: str
    outcome: SubmissionOutcome
    submitted_at: datetime


class HumanDecisionRecord(Record):
    """A human decision of one node attempt: its request, resolution and continuation."""

    decision_id: str
    run_id: str
    node_id: str
    attempt_id: str
    request: dict[str, Any]
    request_digest: str
    expires_at: datetime | None
    default_response: dict[str, Any] | None
    status: DecisionStatus
    provenance: DecisionProvenance | None
    response: dict[str, Any] | None
    answer_digest: str | None
    resolved_at: datetime | None
    revision: int | None
    """The decision's version when it was accepted (the receipt's ``revision``)."""
    continuation_run_id: str | None
    submissions: list[SubmissionRecord]
    created_at: datetime
    updated_at: datetime
    adopted: bool = False
    """Set by ``request_human_decision`` when the same request was already open."""


class DecisionSubmission(Record):
    """What one ``answer_human_decision`` call achieved (decision 26)."""

    decision_id: str
    submission_id: str
    outcome: SubmissionOutcome
    decision: HumanDecisionRecord
    continuation: RunRecord | None = None
    """The continuation child, when the answer was asked to continue the run."""


# -- run leases, managed effects and session recording ------------------------------------


class RunClaim(Record):
    """A worker's lease on a run: the token is returned once, only its SHA-256 is stored."""

    run_id: str
    owner_type: str
    owner_id: str
    token: str
    generation: int
    expires_at: datetime
    lease_ms: int


class EffectRecord(Record):
    """A managed side effect of a run: its request, attempts, status and outcome."""

    effect_id: str
    run_id: str
    effect_type: str
    key: str
    request: dict[str, Any]
    request_digest: str
    recovery: EffectRecovery
    status: EffectStatus
    attempt: int
    outcome: EffectOutcome | None
    result: JsonValue
    created_at: datetime
    updated_at: datetime


class SettingsScopeRecord(Record):
    """A settings scope as it is now (or, from ``settings_scope_at_change``, as it was)."""

    scope_id: str
    origin_run_id: str
    active_run_id: str
    mount_path: str
    invocation: int
    change_number: int
    settings: JsonValue
    settings_hash: str
    policy: dict[str, Any]
    created_at: datetime
    updated_at: datetime


class EffectReservation(Record):
    """What ``reserve_effect`` returns: the effect and whether the caller may apply it now."""

    effect: EffectRecord
    outcome: ReservationOutcome

    @property
    def may_apply(self) -> bool:
        """Only a new reservation or a new attempt owns the side effect."""
        return self.outcome in ("new", "new_attempt")


class SessionSegmentRecord(Record):
    """A recorded session segment of a run (one per attempt, "" for the run level)."""

    segment_id: str
    run_id: str
    attempt_id: str | None
    session_id: str
    binding: dict[str, Any]
    status: CaptureStatus
    entry_count: int
    event_count: int
    last_event_seq: int
    capture: dict[str, Any] | None
    failure: JsonValue
    created_at: datetime
    updated_at: datetime
    integrity: Integrity = "valid"
    diagnostics: list[str] = []


class SessionEntryRecord(Record):
    """One Pi session entry recorded in a segment, by its per-segment sequence."""

    segment_id: str
    attempt_id: str | None
    entry_seq: int
    entry_id: str
    entry: dict[str, Any]
    recorded_at: datetime


class SessionEventRecord(Record):
    """One durable session event record, as the host sent it."""

    segment_id: str
    seq: int
    type: str
    at: str
    node_id: str
    attempt_id: str
    payload: dict[str, Any]
    recorded_at: datetime


class SettingsChangeRecord(Record):
    """One accepted settings change."""

    scope_id: str
    request_id: str
    change_number: int
    actor: Actor
    source: str
    patch_digest: str
    before_hash: str
    after_hash: str
    accepted_at: datetime


class SettingsChange(Record):
    """What ``change_settings`` answers: the scope after the change, and whether it was a retry."""

    scope: SettingsScopeRecord
    change: SettingsChangeRecord
    adopted: bool


class RunSummary(Record):
    """A run as the runs list shows it."""

    run_id: str
    workflow_name: str
    workflow_ref: str
    title: str | None
    status: RunStatus
    paused: bool
    origin_session_id: str | None
    parent_run_id: str | None
    root_run_id: str
    lineage_kind: LineageKind | None
    restart_number: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class RunPage(Record):
    """One keyset page of the runs list; ``next_after`` continues it (None: the last page)."""

    runs: list[RunSummary]
    next_after: str | None


# -- audit ------------------------------------------------------------------------------------


class AuditEntry(Record):
    """One event of an audited run's timeline, with a one-line summary of what it changed."""

    position: int
    recorded_at: datetime
    wire_name: str
    run_id: str
    aggregate_id: str
    version: int
    actor: Actor
    summary: str


class AuditTrail(Record):
    """A run's timeline: every event of the runs it covers (``runs``), in log order."""

    run_id: str
    lineage: bool
    as_of: int | None
    runs: list[str]
    entries: list[AuditEntry]


class AuditDifference(Record):
    """The first row where a stored read model and a fresh re-projection disagree.

    ``expected`` is the re-projected row (None: no such row should exist), ``stored`` the live
    one (None: it is missing); ``key`` is the row's primary key as a list of its values.
    """

    model: str
    table: str
    key: list[JsonValue]
    expected: JsonValue
    stored: JsonValue


class AuditVerdict(Record):
    """``verify_run``: how much was replayed and re-projected, and the first difference."""

    run_id: str
    ok: bool
    runs: list[str]
    events: int
    aggregates: int
    models: list[str]
    difference: AuditDifference | None


BundleProblem = Literal["header", "altered", "removed", "inserted", "reordered", "digest"]


class BundleVerdict(Record):
    """``verify_bundle``: whether an export bundle is intact, else its first problem.

    For an event problem, ``line`` is its line in the file (1 is the header), and
    ``aggregate_id``/``version``/``position`` name the event (for ``removed``: the first
    missing one, as far as the bundle tells); for ``digest``, ``model`` names the read model.
    """

    ok: bool
    run_id: str | None
    events: int
    problem: BundleProblem | None
    detail: str | None
    line: int | None = None
    aggregate_id: str | None = None
    version: int | None = None
    position: int | None = None
    model: str | None = None


class KeptTree(Record):
    """A run tree retention leaves in the live store, with the first reason found."""

    root_run_id: str
    run_ids: list[str]
    reason: str
    detail: str


class ArchivedTree(Record):
    """A run tree whose verified bundle retention wrote: where it is, its SHA-256, and what
    the tree's tombstone records of it (each aggregate's last version and chain head, the
    read-model digests the bundle expects)."""

    root_run_id: str
    run_ids: list[str]
    events: int
    bundle: str
    bundle_sha256: str
    versions: dict[str, int]
    chain_heads: dict[str, str]
    digests: dict[str, Any]


class PrunableTree(Record):
    """A settled run tree a dry run of retention would archive and prune."""

    root_run_id: str
    run_ids: list[str]
    events: int


class PrunedTree(Record):
    """A run tree a prune archived and removed, as its report lists it: its runs, how many
    events left, and the bundle that holds them (its tombstone records the rest)."""

    root_run_id: str
    run_ids: list[str]
    events: int
    bundle: str
    bundle_sha256: str


class PruneReport(Record):
    """What ``prune_runs`` did (or, on a dry run, would do): each archived tree with its
    bundle, each kept tree with the first reason, and the totals."""

    dry_run: bool
    settled_before: datetime
    archived: list[PrunedTree]
    """Trees archived and pruned (none on a dry run)."""
    prunable: list[PrunableTree]
    """On a dry run, the trees that would be archived; else empty."""
    kept: list[KeptTree]
    trees: int
    """Trees archived (a dry run: that would be)."""
    runs: int
    events: int


class RestoredTree(Record):
    """A run tree ``restore_runs`` put back: its runs, how many events, the bundle they came
    from and its SHA-256, and when (the tombstone's ``run-tree.restored``)."""

    root_run_id: str
    run_ids: list[str]
    events: int
    bundle: str
    bundle_sha256: str
    restored_at: datetime
