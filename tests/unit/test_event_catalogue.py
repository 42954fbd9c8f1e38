"""Golden test of the event catalogue: wire names, topics and one stored sample of each event.

The expected bytes below were generated once from ``build_samples()`` and pasted as literals.
If one of these tests fails, a stored event would no longer read back as it was written:
add a ``class_version`` and an upcaster instead of editing the literal.
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from typing import Any
from uuid import UUID

import orjson
import pytest
from eventsourcing.domain import BaseAggregate, Snapshot
from eventsourcing.persistence import StoredEvent

from runledger.domain import catalogue
from runledger.domain.canonical import json_digest
from runledger.domain.effects import Effect, effect_id_for
from runledger.domain.errors import (
    CorruptEventError,
    JsonIntegerTooLargeError,
    UnknownStoredEventError,
)
from runledger.domain.events import LedgerEvent, LedgerSnapshot
from runledger.domain.follow_ups import FollowUp
from runledger.domain.human_decisions import HumanDecision
from runledger.domain.ids import (
    continuation_run_id_for,
    decision_id_for,
    follow_up_id_for,
    follow_up_message_id,
    restart_run_id,
    terminal_message_id,
)
from runledger.domain.packed_state import packed, unpacked
from runledger.domain.run_tree_archives import RunTreeArchive
from runledger.domain.runs import Run
from runledger.domain.session_segments import SessionSegment, segment_id_for
from runledger.domain.settings_policy import check_policy
from runledger.domain.settings_scopes import SettingsScope
from runledger.domain.turn_reservations import TurnReservation
from runledger.domain.values import SYSTEM, Actor, RunStatus
from runledger.domain.workflow_messages import WorkflowMessage, follow_up_content
from runledger.infrastructure.commits.mapper import LedgerMapper, LedgerStoredEvent

T0 = datetime(2026, 1, 1, tzinfo=UTC)
HOST = Actor("host")
SESSION_1 = Actor("session", "session-1")
RUN_ID = "run-1"

WIRE_NAMES = (
    "run.created",
    "run.session-bound",
    "run.progressed",
    "run.paused",
    "run.resumed",
    "run.presentation-instructions-set",
    "run.follow-up-accepted",
    "run.finished",
    "run.restart-child-created",
    "run.continuation-ended",
    "follow-up.queued",
    "follow-up.removed",
    "follow-up.cancelled",
    "workflow-message.created",
    "workflow-message.cancelled",
    "workflow-message.sent",
    "workflow-turn.started",
    "workflow-turn.ended",
    "workflow-turn.reserved",
    "decision.requested",
    "decision.answer-submitted",
    "decision.accepted",
    "decision.cancelled",
    "decision.continuation-created",
    "run.claimed",
    "run.claim-renewed",
    "run.claim-released",
    "session.segment-created",
    "session.entry-appended",
    "session.events-appended",
    "session.capture-updated",
    "effect.reserved",
    "effect.attempt-started",
    "effect.settled",
    "effect.retry-ready",
    "effect.ambiguous",
    "run.update-published",
    "settings.scope-created",
    "settings.changed",
    "settings.scope-moved",
    "run-tree.archived",
    "run-tree.restored",
)

AGGREGATE_TOPICS: dict[type[BaseAggregate[UUID]], str] = {
    Run: "run",
    FollowUp: "follow-up",
    WorkflowMessage: "workflow-message",
    TurnReservation: "workflow-turn-reservation",
    HumanDecision: "decision",
    SessionSegment: "session-segment",
    Effect: "effect",
    SettingsScope: "settings-scope",
    RunTreeArchive: "run-tree-archive",
}

SNAPSHOT_TOPICS = (
    "run.snapshot",
    "follow-up.snapshot",
    "workflow-message.snapshot",
    "workflow-turn-reservation.snapshot",
    "decision.snapshot",
    "session-segment.snapshot",
    "effect.snapshot",
    "settings-scope.snapshot",
    "run-tree-archive.snapshot",
)


class Ticker:
    """A fixed clock: each reading is one millisecond after the previous one."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self) -> datetime:
        self.count += 1
        return T0 + timedelta(milliseconds=self.count)


def existing_root_run(run_id: str, status: RunStatus, now: datetime) -> Run:
    """A root run whose ``run.created`` is not a sample (another run's is)."""
    run = Run.create(
        run_id,
        workflow_name="echo",
        input={},
        workflow_ref=None,
        title=None,
        status=status,
        parent=None,
        lineage_kind=None,
        parent_terminal_fingerprint=None,
        actor=HOST,
        now=now,
    )
    run.collect_events()
    return run


def build_samples() -> dict[str, LedgerEvent]:
    """One event of each wire name, built through the aggregates' own methods."""
    now = Ticker()
    events: list[Any] = []

    run = Run.create(
        RUN_ID,
        workflow_name="echo",
        input={"task": "reply"},
        workflow_ref="builtin:echo",
        title="Reply",
        status="running",
        parent=None,
        lineage_kind=None,
        parent_terminal_fingerprint=None,
        actor=HOST,
        now=now(),
    )
    run.bind_origin_session("session-1", "interactive", actor=HOST, now=now())
    run.record_progress(
        status="waiting",
        current_node="ask",
        current_attempt_id="attempt-1",
        waiting_on=None,
        status_detail="waiting for origin-session input",
        actor=HOST,
        now=now(),
    )
    run.pause(status_detail="paused", actor=HOST, now=now())
    run.resume(actor=HOST, now=now())
    run.set_presentation_instructions("Summarise briefly.", actor=HOST, now=now())
    first_id = follow_up_id_for(RUN_ID, "follow-1")
    second_id = follow_up_id_for(RUN_ID, "follow-2")
    run.accept_follow_up(first_id, actor=SESSION_1, now=now())
    fingerprint = run.fingerprint_for("failed", None, "boom", None)
    terminal_id = terminal_message_id(RUN_ID, fingerprint)
    run.finish(
        status="failed",
        final_output=None,
        error="boom",
        status_detail=None,
        interrupted=False,
        terminal_message_id=terminal_id,
        actor=HOST,
        now=now(),
    )
    run.record_restart_child(
        restart_run_id(terminal_id),
        workflow_message_id=terminal_id,
        workflow_turn_id="turn-1",
        actor=SESSION_1,
        now=now(),
    )
    events += run.collect_events()

    message_ids = {}
    for follow_up_id, request_id in ((first_id, "follow-1"), (second_id, "follow-2")):
        message_ids[follow_up_id] = follow_up_message_id(follow_up_id)
        follow_up = FollowUp.queue(
            follow_up_id,
            run_id=RUN_ID,
            request_id=request_id,
            order=1 if follow_up_id == first_id else 2,
            target_session_id="session-1",
            actor=SESSION_1,
            source="workflow-tool",
            prompt="First task",
            workflow_message_id=message_ids[follow_up_id],
            now=now(),
        )
        if follow_up_id == first_id:
            follow_up.remove(
                actor=Actor("human", "user-1"), source="interactive-command", now=now()
            )
        else:
            follow_up.cancel(
                ended_run_id=RUN_ID, status="failed", reason="boom", actor=SYSTEM, now=now()
            )
        events += follow_up.collect_events()

    for follow_up_id, message_id in message_ids.items():
        message = WorkflowMessage.create(
            message_id,
            run_id=RUN_ID,
            target_session_id="session-1",
            kind="followUp",
            source_id=follow_up_id,
            content=follow_up_content(
                workflow_message_id=message_id,
                follow_up_id=follow_up_id,
                run_id=RUN_ID,
                prompt="First task",
            ),
            actor=SESSION_1,
            now=now(),
        )
        if follow_up_id == first_id:
            message.cancel_if_pending(actor=Actor("human", "user-1"), now=now())
        else:
            message.adopt_entry("entry-1", actor=SESSION_1, now=now())
            message.start_turn("turn-1", actor=SESSION_1, now=now())
            message.end_turn(
                "turn-1",
                stop_reason="completed",
                response_session_entry_id="assistant-1",
                actor=SESSION_1,
                now=now(),
            )
            events += TurnReservation.reserve(
                "turn-1",
                workflow_message_id=message_id,
                run_id=RUN_ID,
                target_session_id="session-1",
                actor=SESSION_1,
                now=now(),
            ).collect_events()
        events += message.collect_events()

    # Appended last so the times pinned for the events above do not shift.
    parent = existing_root_run("parent-1", "waiting", now())
    parent.record_continuation_ended(RUN_ID, status="failed", actor=Actor("system"), now=now())
    events += parent.collect_events()
    events += lease_session_and_effect_events(now)

    decision = HumanDecision.open(
        decision_id_for(RUN_ID, "approve", "attempt-1"),
        run_id=RUN_ID,
        node_id="approve",
        attempt_id="attempt-1",
        request={"title": "Ship it?", "choices": ["yes", "no"]},
        actor=HOST,
        now=now(),
    )
    decision.submit("submission-1", {"choice": "yes"}, actor=Actor("human", "user-1"), now=now())
    decision.record_continuation(
        continuation_run_id_for(decision.decision_id), actor=HOST, now=now()
    )
    events += decision.collect_events()
    cancelled = HumanDecision.open(
        decision_id_for(RUN_ID, "approve", "attempt-2"),
        run_id=RUN_ID,
        node_id="approve",
        attempt_id="attempt-2",
        request={"title": "Ship it?"},
        actor=HOST,
        now=now(),
    )
    cancelled.collect_events()
    cancelled.cancel("explicit_cancel", now=now())
    events += cancelled.collect_events()

    publisher = existing_root_run("run-2", "running", now())
    publisher.publish_update(
        attempt_id="attempt-1",
        update_type="progress",
        key="step",
        data={"done": 1},
        actor=HOST,
        now=now(),
    )
    events += publisher.collect_events()

    scope = SettingsScope.create(
        "run-2:$root:1",
        run_id="run-2",
        origin_run_id="run-2",
        mount_path="",
        invocation=1,
        policy=check_policy(
            {"rules": [{"path": "/mode", "permissions": {"human": ["replace"]}}], "max_bytes": 64}
        ),
        settings={"mode": "a"},
        actor=HOST,
        now=now(),
    )
    patch = [{"op": "replace", "path": "/mode", "value": "b"}]
    scope.change(
        "change-1",
        patch=patch,
        patch_digest=json_digest(patch),
        actor=Actor("human", "user-1"),
        source="interactive-command",
        now=now(),
    )
    scope.move_to("continuation-1", actor=HOST, now=now())
    events += scope.collect_events()

    archive = RunTreeArchive.archive(
        "run-3",
        run_ids=["run-3", "run-3-child"],
        events=4,
        aggregates={
            "0b9f2c4e-1f0d-5b55-9a55-3f1f2d3c4b5a": {"version": 3, "chain_head": "ab" * 32},
            "5d6e7f80-91a2-5b3c-8d4e-5f6a7b8c9d0e": {"version": 1, "chain_head": "cd" * 32},
        },
        bundle="archive/tree-3.jsonl",
        bundle_sha256="ef" * 32,
        removed_digests={"runs": "01" * 32, "terminal_data": "23" * 32},
        actor=SYSTEM,
        now=now(),
    )
    events += archive.collect_events()
    archive.restore(events=4, bundle="moved/tree-3.jsonl", actor=Actor("human", "ops-1"), now=now())
    events += archive.collect_events()

    samples: dict[str, LedgerEvent] = {}
    for event in events:
        samples.setdefault(type(event).TOPIC, event)
    return samples


EXPECTED: dict[str, tuple[str, int, str | None, str | None, bytes]] = {
    "run.created": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        1,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.001000+00:00","originator_topic":"run","actor":{"typ'
        b'e":"host","id":null},"run_id":"run-1","workflow_name":"echo","workflow_ref":"builtin:e'
        b'cho","title":"Reply","input":{"task":"reply"},"status":"running","parent_run_id":null,'
        b'"root_run_id":"run-1","lineage_kind":null,"restart_number":0,"parent_terminal_fingerpr'
        b'int":null,"human_decision":null,"class_version":2}',
    ),
    "run.session-bound": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        2,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.002000+00:00","actor":{"type":"host","id":null},'
        b'"run_id":"run-1","session_id":"session-1","execution_mode":"interactive"}',
    ),
    "run.progressed": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        3,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.003000+00:00","actor":{"type":"host","id":null},'
        b'"run_id":"run-1","status":"waiting","current_node":null,'
        b'"current_attempt_id":"attempt-1","waiting_on":"ask",'
        b'"status_detail":"waiting for origin-session input"}',
    ),
    "run.paused": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        4,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.004000+00:00","actor":{"type":"host","id":null},'
        b'"run_id":"run-1","status_detail":"paused"}',
    ),
    "run.resumed": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        5,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.005000+00:00","actor":{"type":"host","id":null},'
        b'"run_id":"run-1"}',
    ),
    "run.presentation-instructions-set": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        6,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.006000+00:00","actor":{"type":"host","id":null},'
        b'"run_id":"run-1","instructions":"Summarise briefly."}',
    ),
    "run.follow-up-accepted": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        7,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.007000+00:00","actor":{"type":"session",'
        b'"id":"session-1"},"run_id":"run-1",'
        b'"follow_up_id":"follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27","order":1}',
    ),
    "run.finished": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        8,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.008000+00:00","actor":{"type":"host","id":null},'
        b'"run_id":"run-1","status":"failed","final_output":null,"error":"boom",'
        b'"status_detail":null,"interrupted":false,'
        b'"terminal_message_id":"workflow-message-5794024a024675dac82fbbb5dff6d1b8342843e68e32'
        b'944a2eff66cffd1a9b45",'
        b'"terminal_fingerprint":"b4582ac1be60695cd68afeccb517e71aada99e185dae198f2fe00dc4abfe'
        b'aea4"}',
    ),
    "run.restart-child-created": (
        "331bfa57-196a-55de-8a1a-9598fcebd302",
        9,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.009000+00:00","actor":{"type":"session",'
        b'"id":"session-1"},"run_id":"run-1",'
        b'"child_run_id":"restart-292ceef6487a675c90e50e227cc18894aa33445c",'
        b'"workflow_message_id":"workflow-message-5794024a024675dac82fbbb5dff6d1b8342843e68e32'
        b'944a2eff66cffd1a9b45",'
        b'"workflow_turn_id":"turn-1"}',
    ),
    "run.continuation-ended": (
        "26b723a0-ca8f-5750-b437-f1baad9c696c",
        2,
        "parent-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.022000+00:00","actor":{"type":"system","id":null},'
        b'"run_id":"parent-1","continuation_run_id":"run-1","status":"failed"}',
    ),
    "follow-up.queued": (
        "e7c16b01-b77a-5e33-b651-f34e35a5e384",
        1,
        "run-1",
        "follow-ups-of:run-1",
        b'{"timestamp":"2026-01-01T00:00:00.010000+00:00","originator_topic":"follow-up",'
        b'"actor":{"type":"session","id":"session-1"},"run_id":"run-1",'
        b'"follow_up_id":"follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27",'
        b'"request_id":"follow-1","order":1,"target_session_id":"session-1",'
        b'"source":"workflow-tool","prompt":"First task",'
        b'"workflow_message_id":"workflow-message-1de0d362a50efb25288e8a140cf87639d6e3ff7273b6'
        b'2c25a80642fcbb7c30e6"}',
    ),
    "follow-up.removed": (
        "e7c16b01-b77a-5e33-b651-f34e35a5e384",
        2,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.011000+00:00","actor":{"type":"human",'
        b'"id":"user-1"},"run_id":"run-1",'
        b'"follow_up_id":"follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27",'
        b'"source":"interactive-command","reason":"Removed before delivery"}',
    ),
    "follow-up.cancelled": (
        "d564c81f-fbd2-5a98-a149-2e811b10dba7",
        2,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.013000+00:00","actor":{"type":"system","id":null},'
        b'"run_id":"run-1",'
        b'"follow_up_id":"follow-up-d46846b703a8e37632b44c9b2049a2ded8603614",'
        b'"ended_run_id":"run-1","status":"failed","reason":"boom"}',
    ),
    "workflow-message.created": (
        "fd5a8ed9-e5aa-5de1-8792-487f9e866b6f",
        1,
        "run-1",
        "follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27",
        b'{"timestamp":"2026-01-01T00:00:00.014000+00:00",'
        b'"originator_topic":"workflow-message","actor":{"type":"session","id":"session-1"},'
        b'"run_id":"run-1",'
        b'"workflow_message_id":"workflow-message-1de0d362a50efb25288e8a140cf87639d6e3ff7273b6'
        b'2c25a80642fcbb7c30e6",'
        b'"target_session_id":"session-1","kind":"followUp",'
        b'"source_id":"follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27",'
        b'"content":{"schema":"pi-workflows.workflow-message-content.v1",'
        b'"customType":"pi-workflows-follow-up","content":"First task","display":true,'
        b'"details":{"workflowMessageId":"workflow-message-1de0d362a50efb25288e8a140cf87639d6e'
        b'3ff7273b62c25a80642fcbb7c30e6",'
        b'"followUpId":"follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27","runId":"run-1",'
        b'"kind":"followUp"},"triggerTurn":true},'
        b'"content_digest":"041e9edc07b9f316cc37d6aa6a87bd7317c990af0adbb4d1c6583be29f15f125"}',
    ),
    "workflow-message.cancelled": (
        "fd5a8ed9-e5aa-5de1-8792-487f9e866b6f",
        2,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.015000+00:00","actor":{"type":"human",'
        b'"id":"user-1"},"run_id":"run-1",'
        b'"workflow_message_id":"workflow-message-1de0d362a50efb25288e8a140cf87639d6e3ff7273b6'
        b'2c25a80642fcbb7c30e6",'
        b'"kind":"followUp","source_id":"follow-up-9ac1de197bf7cabb02df6922a0d0ad1027c73d27"}',
    ),
    "workflow-message.sent": (
        "33c13497-58ce-5524-abbe-348590003b09",
        2,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.017000+00:00","actor":{"type":"session",'
        b'"id":"session-1"},"run_id":"run-1",'
        b'"workflow_message_id":"workflow-message-82ff9b0652009b4ee765acd5dc4e349ff67a46a490b3'
        b'739e080d90b5cece5789",'
        b'"kind":"followUp","source_id":"follow-up-d46846b703a8e37632b44c9b2049a2ded8603614",'
        b'"target_session_id":"session-1","pi_session_entry_id":"entry-1"}',
    ),
    "workflow-turn.started": (
        "33c13497-58ce-5524-abbe-348590003b09",
        3,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.018000+00:00","actor":{"type":"session",'
        b'"id":"session-1"},"run_id":"run-1","workflow_turn_id":"turn-1",'
        b'"workflow_message_id":"workflow-message-82ff9b0652009b4ee765acd5dc4e349ff67a46a490b3'
        b'739e080d90b5cece5789",'
        b'"target_session_id":"session-1"}',
    ),
    "workflow-turn.ended": (
        "33c13497-58ce-5524-abbe-348590003b09",
        4,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.019000+00:00","actor":{"type":"session",'
        b'"id":"session-1"},"run_id":"run-1","workflow_turn_id":"turn-1",'
        b'"workflow_message_id":"workflow-message-82ff9b0652009b4ee765acd5dc4e349ff67a46a490b3'
        b'739e080d90b5cece5789",'
        b'"stop_reason":"completed","response_session_entry_id":"assistant-1"}',
    ),
    "workflow-turn.reserved": (
        "a4b7893b-be4a-5bbd-a000-ea843023ecf3",
        1,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.020000+00:00",'
        b'"originator_topic":"workflow-turn-reservation","actor":{"type":"session",'
        b'"id":"session-1"},"run_id":"run-1","workflow_turn_id":"turn-1",'
        b'"workflow_message_id":"workflow-message-82ff9b0652009b4ee765acd5dc4e349ff67a46a490b3'
        b'739e080d90b5cece5789",'
        b'"target_session_id":"session-1"}',
    ),
    "decision.requested": (
        "f3635c77-eaa3-581a-8e4e-82813bffa9e4",
        1,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.037000+00:00","originator_topic":"decision","actor":'
        b'{"type":"host","id":null},"run_id":"run-1","decision_id":"decision-6080c2d2c197b128705'
        b'97b67e812a1ab4f1a8e25","node_id":"approve","attempt_id":"attempt-1","request":{"title"'
        b':"Ship it?","choices":["yes","no"]},"request_digest":"69933f31e386d3a086bfa7da49468034'
        b'712a50a00c258f33153288297814a72a"}',
    ),
    "decision.answer-submitted": (
        "f3635c77-eaa3-581a-8e4e-82813bffa9e4",
        2,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.038000+00:00","actor":{"type":"human","id":"user-1"}'
        b',"run_id":"run-1","decision_id":"decision-6080c2d2c197b12870597b67e812a1ab4f1a8e25","s'
        b'ubmission_id":"submission-1","response":{"choice":"yes"},"answer_digest":"b84d24ba8de9'
        b'f13caa5ac3863ee331d23754bdf6b3f92a11fb52848bc1449487","outcome":"won"}',
    ),
    "decision.accepted": (
        "f3635c77-eaa3-581a-8e4e-82813bffa9e4",
        3,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.038000+00:00","actor":{"type":"human","id":"user-1"}'
        b',"run_id":"run-1","decision_id":"decision-6080c2d2c197b12870597b67e812a1ab4f1a8e25","p'
        b'rovenance":"human","submission_id":"submission-1","response":{"choice":"yes"},"answer_'
        b'digest":"b84d24ba8de9f13caa5ac3863ee331d23754bdf6b3f92a11fb52848bc1449487"}',
    ),
    "decision.cancelled": (
        "2994dd72-7d26-51dc-a13e-fc6e00174dcc",
        2,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.041000+00:00","actor":{"type":"control","id":null},"'
        b'run_id":"run-1","decision_id":"decision-f45abc40cc355312f06f055e947e6b363a491f3d","pro'
        b'venance":"explicit_cancel"}',
    ),
    "decision.continuation-created": (
        "f3635c77-eaa3-581a-8e4e-82813bffa9e4",
        4,
        "run-1",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.039000+00:00","actor":{"type":"host","id":null},"run'
        b'_id":"run-1","decision_id":"decision-6080c2d2c197b12870597b67e812a1ab4f1a8e25","contin'
        b'uation_run_id":"continuation-6080c2d2c197b12870597b67e812a1ab4f1a8e25"}',
    ),
    "run.update-published": (
        "e29dc05a-465a-5c93-9746-730c671ca5be",
        2,
        "run-2",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.043000+00:00","actor":{"type":"host","id":null'
        b'},"run_id":"run-2","update_id":"update-83b1bb1ef878863583a13733e64f77275634fc22"'
        b',"seq":2,"attempt_id":"attempt-1","update_type":"progress","key":"step","data":{'
        b'"done":1}}',
    ),
    "settings.scope-created": (
        "47758c9d-e5cd-5f74-bc9c-63644734dd0d",
        1,
        "run-2",
        "settings-of:run-2",
        b'{"timestamp":"2026-01-01T00:00:00.044000+00:00","originator_topic":"settings-sco'
        b'pe","actor":{"type":"host","id":null},"run_id":"run-2","scope_id":"run-2:$root:1'
        b'","origin_run_id":"run-2","mount_path":"","invocation":1,"policy":{"rules":[{"pa'
        b'th":"/mode","permissions":{"human":["replace"]}}],"max_bytes":64},"settings":{"m'
        b'ode":"a"},"settings_hash":"77665b3ffc0e7da8606e368e9ae6ba9de9109cefd67f4bc193927'
        b'44693894247"}',
    ),
    "settings.changed": (
        "47758c9d-e5cd-5f74-bc9c-63644734dd0d",
        2,
        "run-2",
        None,
        b'{"timestamp":"2026-01-01T00:00:00.045000+00:00","actor":{"type":"human","id":"us'
        b'er-1"},"run_id":"run-2","scope_id":"run-2:$root:1","request_id":"change-1","chan'
        b'ge_number":1,"source":"interactive-command","patch":[{"op":"replace","path":"/mo'
        b'de","value":"b"}],"patch_digest":"27a221699a57d53a558966dbb100ddbfd6c105e6e4afae'
        b'deb280211a0f0818ba","before_hash":"77665b3ffc0e7da8606e368e9ae6ba9de9109cefd67f4'
        b'bc19392744693894247","after_hash":"6275e35fd1c7dfbf89a70ad5cc6e1baa90926cab401e2'
        b'8814baebca625c05c7e","settings":{"mode":"b"},"changed_paths":["/mode"],"class_ve'
        b'rsion":2}',
    ),
    "settings.scope-moved": (
        "47758c9d-e5cd-5f74-bc9c-63644734dd0d",
        3,
        "continuation-1",
        "settings-of:continuation-1",
        b'{"timestamp":"2026-01-01T00:00:00.046000+00:00","actor":{"type":"host","id":null'
        b'},"run_id":"continuation-1","scope_id":"run-2:$root:1","from_run_id":"run-2","mo'
        b'unt_path":"","invocation":1,"change_number":1,"settings_hash":"6275e35fd1c7dfbf8'
        b'9a70ad5cc6e1baa90926cab401e28814baebca625c05c7e"}',
    ),
}
"""wire name -> (originator id, version, run id column, lookup key column, state bytes)."""

EXPECTED.update(
    {
        "run.claimed": (
            "2690f010-72bb-536a-af45-e55d24fbdf53",
            2,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.024000+00:00","actor":{"type":"controller","id'
            b'":"worker-1"},"run_id":"leased-1","owner_type":"controller","owner_id":"worker-1'
            b'","generation":1,"token_hash":"3f08aace122ee2368432c1ca23a049bc640bafbf00fdf33a5'
            b'2429f38ba12dbf9","lease_ms":30000,"expires_at":"2026-01-01T00:00:30.024000+00:00'
            b'"}',
        ),
        "run.claim-renewed": (
            "2690f010-72bb-536a-af45-e55d24fbdf53",
            3,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.025000+00:00","actor":{"type":"controller","id'
            b'":"worker-1"},"run_id":"leased-1","generation":1,"expires_at":"2026-01-01T00:00:'
            b'30.025000+00:00"}',
        ),
        "run.claim-released": (
            "2690f010-72bb-536a-af45-e55d24fbdf53",
            4,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.026000+00:00","actor":{"type":"controller","id'
            b'":"worker-1"},"run_id":"leased-1","generation":1}',
        ),
        "session.segment-created": (
            "84f78cd1-a547-5149-8207-bfeebccf24e3",
            1,
            "leased-1",
            "segments-of:leased-1",
            b'{"timestamp":"2026-01-01T00:00:00.027000+00:00","originator_topic":"session-segm'
            b'ent","actor":{"type":"session","id":"session-1"},"run_id":"leased-1","segment_id'
            b'":"segment-cbef0b2b4cc4b416ed033db203a54fb08a34b08b","attempt_id":"attempt-1","s'
            b'ession_id":"session-1","binding":{"schema":"pi-workflows.session-binding.v1","ru'
            b'nId":"leased-1","piSessionId":"session-1","boundAt":"2026-01-01T00:00:00.000Z"}}',
        ),
        "session.entry-appended": (
            "84f78cd1-a547-5149-8207-bfeebccf24e3",
            2,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.028000+00:00","actor":{"type":"session","id":"'
            b'session-1"},"run_id":"leased-1","segment_id":"segment-cbef0b2b4cc4b416ed033db203'
            b'a54fb08a34b08b","entry_seq":1,"entry_id":"entry-1","entry":{"id":"entry-1","type'
            b'":"message"}}',
        ),
        "session.events-appended": (
            "84f78cd1-a547-5149-8207-bfeebccf24e3",
            3,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.029000+00:00","actor":{"type":"session","id":"'
            b'session-1"},"run_id":"leased-1","segment_id":"segment-cbef0b2b4cc4b416ed033db203'
            b'a54fb08a34b08b","first_seq":1,"last_seq":1,"records":[{"seq":1,"at":"2026-01-01T'
            b'00:00:01.000Z","type":"turn_started","nodeId":"ask","attemptId":"attempt-1","pay'
            b'load":{"turn":1}}]}',
        ),
        "session.capture-updated": (
            "84f78cd1-a547-5149-8207-bfeebccf24e3",
            4,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.030000+00:00","actor":{"type":"session","id":"'
            b'session-1"},"run_id":"leased-1","segment_id":"segment-cbef0b2b4cc4b416ed033db203'
            b'a54fb08a34b08b","capture":{"schema":"pi-workflows.session-capture.v1","eventSche'
            b'ma":"pi-workflows.session-event.v1","status":"complete","entryCount":1,"eventCou'
            b'nt":1}}',
        ),
        "effect.reserved": (
            "b0d55233-978c-552f-93d2-8c476d899a3a",
            1,
            "leased-1",
            "effects-of:leased-1",
            b'{"timestamp":"2026-01-01T00:00:00.031000+00:00","originator_topic":"effect","act'
            b'or":{"type":"host","id":null},"run_id":"leased-1","effect_id":"effect-7122d56044'
            b'f1240bc30dab933ea48af9252aa9d1","effect_type":"email","key":"mail-1","request":{'
            b'"to":"a@example.com","recovery":"idempotent"},"request_digest":"bb6ee8377c9081c2'
            b'1e1c2b66af51b29e7891a4e86a9052a3c51683856196106a","recovery":"idempotent"}',
        ),
        "effect.attempt-started": (
            "b0d55233-978c-552f-93d2-8c476d899a3a",
            3,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.033000+00:00","actor":{"type":"host","id":null'
            b'},"run_id":"leased-1","effect_id":"effect-7122d56044f1240bc30dab933ea48af9252aa9'
            b'd1","attempt":2}',
        ),
        "effect.settled": (
            "b0d55233-978c-552f-93d2-8c476d899a3a",
            4,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.034000+00:00","actor":{"type":"host","id":null'
            b'},"run_id":"leased-1","effect_id":"effect-7122d56044f1240bc30dab933ea48af9252aa9'
            b'd1","attempt":2,"outcome":"applied","result":{"id":7}}',
        ),
        "effect.retry-ready": (
            "b0d55233-978c-552f-93d2-8c476d899a3a",
            2,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.032000+00:00","actor":{"type":"system","id":nu'
            b'll},"run_id":"leased-1","effect_id":"effect-7122d56044f1240bc30dab933ea48af9252a'
            b'a9d1","attempt":1,"reason":"recovered"}',
        ),
        "effect.ambiguous": (
            "94882925-f132-5d99-9eda-061f700372ab",
            2,
            "leased-1",
            None,
            b'{"timestamp":"2026-01-01T00:00:00.036000+00:00","actor":{"type":"system","id":nu'
            b'll},"run_id":"leased-1","effect_id":"effect-86786186962546d9850f28e5a9e073c5c713'
            b'3ac5","attempt":1}',
        ),
    }
)

EXPECTED["run-tree.archived"] = (
    "eed5aa9d-e0cf-5e63-a490-5b5413114bc5",
    1,
    "run-3",
    "run-tree-archive:run-3",
    b'{"timestamp":"2026-01-01T00:00:00.047000+00:00","originator_topic":"run-tree-archive'
    b'","actor":{"type":"system","id":null},"run_id":"run-3","run_ids":["run-3","run-3-chi'
    b'ld"],"events":4,"aggregates":{"0b9f2c4e-1f0d-5b55-9a55-3f1f2d3c4b5a":{"version":3,"c'
    b'hain_head":"abababababababababababababababababababababababababababababababab"},"5d6e'
    b'7f80-91a2-5b3c-8d4e-5f6a7b8c9d0e":{"version":1,"chain_head":"cdcdcdcdcdcdcdcdcdcdcdc'
    b'dcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcdcd"}},"bundle":"archive/tree-3.jsonl","bundle'
    b'_sha256":"efefefefefefefefefefefefefefefefefefefefefefefefefefefefefefefef","removed'
    b'_digests":{"runs":"0101010101010101010101010101010101010101010101010101010101010101"'
    b',"terminal_data":"2323232323232323232323232323232323232323232323232323232323232323"}'
    b"}",
)


EXPECTED["run-tree.restored"] = (
    "eed5aa9d-e0cf-5e63-a490-5b5413114bc5",
    2,
    "run-3",
    None,
    b'{"timestamp":"2026-01-01T00:00:00.048000+00:00","actor":{"type":"human","id":"ops-1"},'
    b'"run_id":"run-3","events":4,"bundle":"moved/tree-3.jsonl"}',
)


def lease_session_and_effect_events(now: Ticker) -> list[Any]:
    """One run's lease events, a recorded session segment and a managed effect's events."""
    leased = Run.create(
        "leased-1",
        workflow_name="echo",
        input={},
        workflow_ref=None,
        title=None,
        status="running",
        parent=None,
        lineage_kind=None,
        parent_terminal_fingerprint=None,
        actor=HOST,
        now=now(),
    )
    leased.collect_events()
    worker = Actor("controller", "worker-1")
    claim = leased.claim(worker, token="token-1", lease_ms=30000, now=now())
    assert claim is not None
    leased.renew_claim(claim, lease_ms=30000, now=now())
    leased.release_claim(claim, now=now())
    events: list[Any] = list(leased.collect_events())

    binding = {
        "schema": "pi-workflows.session-binding.v1",
        "runId": "leased-1",
        "piSessionId": "session-1",
        "boundAt": "2026-01-01T00:00:00.000Z",
    }
    segment = SessionSegment.bind(
        segment_id_for("leased-1", "attempt-1"),
        run_id="leased-1",
        attempt_id="attempt-1",
        session_id="session-1",
        binding=binding,
        now=now(),
    )
    segment.append_entry({"id": "entry-1", "type": "message"}, now=now())
    record = {
        "seq": 1,
        "at": "2026-01-01T00:00:01.000Z",
        "type": "turn_started",
        "nodeId": "ask",
        "attemptId": "attempt-1",
        "payload": {"turn": 1},
    }
    segment.append_events([record], now=now())
    capture = {
        "schema": "pi-workflows.session-capture.v1",
        "eventSchema": "pi-workflows.session-event.v1",
        "status": "complete",
        "entryCount": 1,
        "eventCount": 1,
    }
    segment.update_capture(capture, "complete", now=now())
    events += segment.collect_events()

    for key, recovery in (("mail-1", "idempotent"), ("mail-2", "manual")):
        effect = Effect.reserve_new(
            effect_id_for("leased-1", "email", key),
            run_id="leased-1",
            effect_type="email",
            key=key,
            request={"to": "a@example.com", "recovery": recovery},
            recovery=recovery,  # type: ignore[arg-type]
            actor=HOST,
            now=now(),
        )
        if recovery == "idempotent":
            effect.recover(actor=SYSTEM, now=now())
            effect.reserve_again(effect.request, actor=HOST, now=now())
            effect.settle(attempt=2, outcome="applied", result={"id": 7}, actor=HOST, now=now())
        else:
            effect.recover(actor=SYSTEM, now=now())
        events += effect.collect_events()
    return events


SAMPLES = build_samples()
MAPPER = LedgerMapper()


# -- the catalogue ----------------------------------------------------------------------------


def test_the_wire_names_are_pinned_in_order() -> None:
    assert catalogue.WIRE_NAMES == WIRE_NAMES


def test_every_wire_name_is_unique() -> None:
    assert len(set(catalogue.WIRE_NAMES)) == len(catalogue.WIRE_NAMES)


def test_the_aggregate_topics_are_pinned() -> None:
    assert {cls: vars(cls)["TOPIC"] for cls in catalogue.AGGREGATES} == AGGREGATE_TOPICS


def test_the_snapshot_topics_are_pinned() -> None:
    assert tuple(snapshot.TOPIC for snapshot in catalogue.SNAPSHOTS) == SNAPSHOT_TOPICS


def test_stored_topics_resolve_only_to_catalogue_events_and_snapshots() -> None:
    assert tuple(catalogue.EVENT_CLASSES) == WIRE_NAMES + SNAPSHOT_TOPICS


def test_every_catalogued_event_knows_the_aggregate_that_declares_it() -> None:
    # Decoding builds an event's aggregate from this map, never from stored data: an aggregate
    # that forgot OwnsNestedEvents could not be loaded at all.
    from runledger.domain.events import EVENT_OWNERS

    unowned = [topic for topic, cls in catalogue.EVENT_CLASSES.items() if cls not in EVENT_OWNERS]
    assert unowned == []


@pytest.mark.parametrize("aggregate", list(AGGREGATE_TOPICS), ids=lambda cls: cls.__name__)
def test_every_event_an_aggregate_declares_is_in_the_catalogue(aggregate: type) -> None:
    declared = {
        value
        for value in vars(aggregate).values()
        if isinstance(value, type) and issubclass(value, LedgerEvent) and "TOPIC" in vars(value)
    }
    assert declared <= set(catalogue.DOMAIN_EVENTS)


def test_the_samples_cover_every_wire_name() -> None:
    assert sorted(SAMPLES) == sorted(WIRE_NAMES)
    assert sorted(EXPECTED) == sorted(WIRE_NAMES)


# -- one stored sample of each event ---------------------------------------------------------


@pytest.mark.parametrize("wire_name", WIRE_NAMES)
def test_each_event_is_stored_as_its_pinned_bytes(wire_name: str) -> None:
    stored = MAPPER.to_stored_event(SAMPLES[wire_name])
    originator_id, version, run_id, lookup_key, state = EXPECTED[wire_name]
    assert isinstance(stored, LedgerStoredEvent)
    assert stored.topic == wire_name
    assert (str(stored.originator_id), stored.originator_version) == (originator_id, version)
    assert (stored.run_id, stored.lookup_key) == (run_id, lookup_key)
    # The pinned bytes are the payload's JSON; the log keeps it packed (test_packed_state).
    assert unpacked(stored.state) == state
    assert stored.state == packed(state)


@pytest.mark.parametrize("wire_name", WIRE_NAMES)
def test_each_pinned_stored_event_reads_back_as_the_event(wire_name: str) -> None:
    originator_id, version, _, _, state = EXPECTED[wire_name]
    stored = StoredEvent(
        originator_id=UUID(originator_id),
        originator_version=version,
        topic=wire_name,
        state=state,
    )
    assert MAPPER.to_domain_event(stored) == SAMPLES[wire_name]


@pytest.mark.parametrize("wire_name", WIRE_NAMES)
def test_each_event_round_trips_to_an_equal_event(wire_name: str) -> None:
    event = SAMPLES[wire_name]
    restored = MAPPER.to_domain_event(MAPPER.to_stored_event(event))
    assert type(restored) is type(event)
    assert restored == event
    assert isinstance(restored.timestamp, datetime)


def test_a_stored_originator_id_given_as_text_reads_back_as_a_uuid() -> None:
    originator_id, version, _, _, state = EXPECTED["run.created"]
    stored = StoredEvent(
        originator_id=originator_id,
        originator_version=version,
        topic="run.created",
        state=state,
    )
    assert MAPPER.to_domain_event(stored) == SAMPLES["run.created"]


def test_a_run_input_with_an_integer_the_store_cannot_hold_is_rejected_before_storing() -> None:
    with pytest.raises(JsonIntegerTooLargeError):
        Run.create(
            RUN_ID,
            workflow_name="echo",
            input={"count": 2**64},
            workflow_ref=None,
            title=None,
            status="running",
            parent=None,
            lineage_kind=None,
            parent_terminal_fingerprint=None,
            actor=HOST,
            now=T0,
        )


# -- the catalogue is an allowlist ------------------------------------------------------------


def unknown(topic: str, state: bytes = b"{}") -> StoredEvent:
    return StoredEvent(
        originator_id=UUID("331bfa57-196a-55de-8a1a-9598fcebd302"),
        originator_version=1,
        topic=topic,
        state=state,
    )


def test_a_stored_topic_outside_the_catalogue_is_a_corrupt_event() -> None:
    with pytest.raises(CorruptEventError) as raised:
        MAPPER.to_domain_event(unknown("os:system"))
    assert str(raised.value) == (
        "Stored event 'os:system' of aggregate 331bfa57-196a-55de-8a1a-9598fcebd302 version 1"
        " is corrupt: wire name 'os:system' is not in the runledger event catalogue;"
        " repair the store"
    )


def test_a_stored_topic_naming_a_module_never_imports_it() -> None:
    assert "this" not in sys.modules  # importing "this" would print the Zen of Python
    with pytest.raises(CorruptEventError):
        MAPPER.to_domain_event(unknown("this:s"))
    assert "this" not in sys.modules


def test_a_stored_topic_naming_a_real_library_event_class_is_still_an_error() -> None:
    with pytest.raises(CorruptEventError) as raised:
        MAPPER.to_domain_event(unknown("eventsourcing.domain:Snapshot"))
    assert raised.value.reason == (
        "wire name 'eventsourcing.domain:Snapshot' is not in the runledger event catalogue"
    )


def test_a_snapshot_of_an_aggregate_outside_the_catalogue_is_an_error() -> None:
    state = b'{"timestamp":"2026-01-01T00:00:00+00:00","topic":"os:system","state":{}}'
    with pytest.raises(CorruptEventError) as raised:
        MAPPER.to_domain_event(unknown("run.snapshot", state))
    assert (
        raised.value.reason == "field 'topic' must be 'run', the aggregate of this event, not text"
    )


def test_an_event_outside_the_catalogue_is_never_stored() -> None:
    foreign = Snapshot(
        originator_id=UUID("331bfa57-196a-55de-8a1a-9598fcebd302"),
        originator_version=1,
        timestamp=T0,
        topic="run",
        state={},
    )
    with pytest.raises(UnknownStoredEventError):
        MAPPER.to_stored_event(foreign)


# -- snapshots ----------------------------------------------------------------------------------


def restored(stored: StoredEvent) -> object:
    """The aggregate a stored snapshot rebuilds."""
    snapshot = MAPPER.to_domain_event(stored)
    assert isinstance(snapshot, LedgerSnapshot)
    return snapshot.mutate(None)


def ended_waiting_run() -> Run:
    run = Run.create(
        RUN_ID,
        workflow_name="echo",
        input={"task": "reply"},
        workflow_ref=None,
        title=None,
        status="waiting",
        parent=None,
        lineage_kind=None,
        parent_terminal_fingerprint=None,
        actor=HOST,
        now=T0,
    )
    run.accept_follow_up("follow-up-a", actor=SESSION_1, now=T0 + timedelta(seconds=1))
    run.collect_events()
    return run


def test_a_run_snapshot_round_trip_restores_its_datetimes() -> None:
    run = ended_waiting_run()
    stored = MAPPER.to_stored_event(Run.Snapshot.take(run))
    rebuilt = restored(stored)
    assert isinstance(rebuilt, Run)
    assert rebuilt.finished_at == T0
    assert isinstance(rebuilt.finished_at, datetime)
    assert (rebuilt.created_on, rebuilt.modified_on) == (T0, T0 + timedelta(seconds=1))
    assert rebuilt == run


def test_a_snapshot_stores_no_aggregate_bookkeeping() -> None:
    stored = MAPPER.to_stored_event(Run.Snapshot.take(ended_waiting_run()))
    assert stored.topic == "run.snapshot"
    payload = unpacked(stored.state)
    assert b'"topic":"run"' in payload
    for bookkeeping in (b'"_id"', b'"_version"', b'"_pending_events"'):
        assert bookkeeping not in payload


def test_a_restored_snapshot_continues_with_the_next_version() -> None:
    run = ended_waiting_run()
    rebuilt = restored(MAPPER.to_stored_event(Run.Snapshot.take(run)))
    assert isinstance(rebuilt, Run)
    assert (rebuilt.id, rebuilt.version, rebuilt.pending_events) == (run.id, 2, [])
    rebuilt.accept_follow_up("follow-up-b", actor=SESSION_1, now=T0 + timedelta(seconds=2))
    (accepted,) = rebuilt.collect_events()
    assert isinstance(accepted, Run.FollowUpAccepted)
    assert (accepted.originator_version, accepted.order, rebuilt.follow_up_count) == (3, 2, 2)


def test_a_workflow_message_snapshot_round_trip_keeps_its_turns() -> None:
    message = WorkflowMessage.create(
        "workflow-message-x",
        run_id=RUN_ID,
        target_session_id="session-1",
        kind="notification",
        source_id="notification-1",
        content={
            "schema": "pi-workflows.workflow-message-content.v1",
            "customType": "pi-workflows-notification",
            "content": "Hosted progress.",
            "display": True,
            "details": None,
            "triggerTurn": False,
        },
        actor=HOST,
        now=T0,
    )
    message.adopt_entry("entry-1", actor=SESSION_1, now=T0)
    message.start_turn("turn-1", actor=SESSION_1, now=T0 + timedelta(seconds=1))
    message.collect_events()
    stored = MAPPER.to_stored_event(WorkflowMessage.Snapshot.take(message))
    rebuilt = restored(stored)
    assert rebuilt == message
    assert isinstance(rebuilt, WorkflowMessage)
    assert rebuilt.turn_record("turn-1").started_at == T0 + timedelta(seconds=1)


# -- run.created version 1 (before human-decision receipts) ----------------------------------

RUN_CREATED_V1_STATE = (
    b'{"timestamp":"2026-01-01T00:00:00.001000+00:00","originator_topic":"run",'
    b'"actor":{"type":"host","id":null},"run_id":"run-1","workflow_name":"echo",'
    b'"workflow_ref":"builtin:echo","title":"Reply","input":{"task":"reply"},'
    b'"status":"running","parent_run_id":null,"root_run_id":"run-1","lineage_kind":null,'
    b'"restart_number":0,"parent_terminal_fingerprint":null}'
)
"""The bytes every run.created had before version 2 added ``human_decision``."""


def test_a_version_1_run_created_reads_back_as_a_run_without_a_receipt() -> None:
    stored = StoredEvent(
        originator_id=UUID("331bfa57-196a-55de-8a1a-9598fcebd302"),
        originator_version=1,
        topic="run.created",
        state=RUN_CREATED_V1_STATE,
    )
    event = MAPPER.to_domain_event(stored)
    assert event == SAMPLES["run.created"]
    run = event.mutate(None)
    assert isinstance(run, Run)
    assert run.to_record().human_decision is None


def test_a_version_1_run_snapshot_restores_a_run_without_a_receipt() -> None:
    run = ended_waiting_run()
    stored = MAPPER.to_stored_event(Run.Snapshot.take(run))
    state = orjson.loads(unpacked(stored.state))
    assert state["state"].pop("class_version") == 2
    del state["state"]["human_decision"]
    old = StoredEvent(
        originator_id=stored.originator_id,
        originator_version=stored.originator_version,
        topic=stored.topic,
        state=orjson.dumps(state),
    )
    rebuilt = restored(old)
    assert isinstance(rebuilt, Run)
    assert rebuilt.human_decision is None
    assert rebuilt == run


SETTINGS_CHANGED_V1_STATE = (
    b'{"timestamp":"2026-01-01T00:00:00.045000+00:00","actor":{"type":"human","id":"us'
    b'er-1"},"run_id":"run-2","scope_id":"run-2:$root:1","request_id":"change-1","chan'
    b'ge_number":1,"source":"interactive-command","patch":[{"op":"replace","path":"/mo'
    b'de","value":"b"}],"patch_digest":"27a221699a57d53a558966dbb100ddbfd6c105e6e4afae'
    b'deb280211a0f0818ba","before_hash":"77665b3ffc0e7da8606e368e9ae6ba9de9109cefd67f4'
    b'bc19392744693894247","after_hash":"6275e35fd1c7dfbf89a70ad5cc6e1baa90926cab401e2'
    b'8814baebca625c05c7e","settings":{"mode":"b"}}'
)
"""The bytes every settings.changed had before version 2 added ``changed_paths``."""


def test_a_version_1_settings_change_reads_back_with_the_paths_its_patch_wrote() -> None:
    stored = StoredEvent(
        originator_id=UUID("47758c9d-e5cd-5f74-bc9c-63644734dd0d"),
        originator_version=2,
        topic="settings.changed",
        state=SETTINGS_CHANGED_V1_STATE,
    )

    event = MAPPER.to_domain_event(stored)

    assert event == SAMPLES["settings.changed"]
    assert event.changed_paths == ["/mode"]  # type: ignore[attr-defined]
