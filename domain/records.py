"""The frozen records commands and queries return (DESIGN.md "Records")."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from runledger.domain.values import JsonValue


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActorRecord(Record):
    type: str
    id: str | None = None


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
    run_id: str
    workflow_name: str
    workflow_ref: str
    title: str | None
    status: str
    paused: bool
    status_detail: str | None
    input: JsonValue
    final_output: JsonValue
    error: str | None
    origin_session_id: str | None
    execution_mode: str | None
    parent_run_id: str | None
    root_run_id: str
    lineage_kind: str | None
    restart_number: int
    parent_terminal_fingerprint: str | None
    current_node: str | None
    current_attempt_id: str | None
    waiting_on: str | None
    presentation_instructions: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    updates: list[UpdateRecord] = []
    """The current progress updates (latest per type and key), by sequence."""


class FollowUpRecord(Record):
    follow_up_id: str
    run_id: str
    request_id: str
    order: int
    target_session_id: str
    actor: ActorRecord
    source: str
    prompt: str
    state: str
    reason: str | None
    created_at: datetime
    updated_at: datetime
    delivery: str | None = None
    """Status of the follow-up's latest message; set by the queue read model only."""


class QueuedFollowUp(Record):
    follow_up: FollowUpRecord
    adopted: bool


class FollowUpQueue(Record):
    run_id: str
    origin_session_id: str
    follow_ups: list[FollowUpRecord]


class WorkflowMessageRecord(Record):
    workflow_message_id: str
    run_id: str
    target_session_id: str
    kind: str
    source_id: str
    content: dict[str, Any]
    content_digest: str
    status: str
    pi_session_entry_id: str | None
    created_at: datetime
    updated_at: datetime
    order: int | None = None
    """Session-wide order; set by the outbox read model, None from get_workflow_message."""


class TurnRecord(Record):
    workflow_turn_id: str
    workflow_message_id: str
    run_id: str
    target_session_id: str
    state: str
    stop_reason: str | None
    response_session_entry_id: str | None
    started_at: datetime
    ended_at: datetime | None


class RestartReceipt(Record):
    run_id: str
    parent_run_id: str
    restart_number: int
    adopted: bool


class TerminalData(Record):
    run_id: str
    status: str
    status_detail: str | None
    input: JsonValue
    final_output: JsonValue
    error: str | None
    presentation_instructions: str
    restart_number: int


class ViewerDelta(Record):
    run_id: str
    presentation_revision: int
    delta_index: int
    target_type: str
    target_key: str
    patch: list[dict[str, Any]]
    recorded_at: datetime


class ViewerDeltas(Record):
    kind: Literal["deltas"] = "deltas"
    current_revision: int
    retained_from_revision: int
    deltas: list[ViewerDelta]


class SnapshotRequired(Record):
    kind: Literal["snapshot_required"] = "snapshot_required"
    current_revision: int
    retained_from_revision: int


class LoggedEvent(Record):
    position: int
    wire_name: str
    aggregate_id: str
    version: int
    recorded_at: datetime
    actor: ActorRecord
    payload: dict[str, Any]


class ProjectionStatus(Record):
    name: str
    version: int
    position: int
    lag: int
    last_error: str | None = None


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


class SettingsChangeRecord(Record):
    """One accepted settings change."""

    scope_id: str
    request_id: str
    change_number: int
    actor: ActorRecord
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
    status: str
    paused: bool
    origin_session_id: str | None
    parent_run_id: str | None
    root_run_id: str
    lineage_kind: str | None
    restart_number: int
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class RunPage(Record):
    """One keyset page of the runs list; ``next_after`` continues it (None: the last page)."""

    runs: list[RunSummary]
    next_after: str | None
