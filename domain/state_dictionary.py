"""The frozen text the log's packed payloads are compressed against (``packed_state``).

Generated once from the event catalogue (each wire name's field names, in stored order) and
the domain's fixed strings (content schemas, actor types), never from any store's data.
Stored payloads depend on these exact bytes for ever: never edit this text; a better one is
a new version beside it with a marker of its own (``tests/unit/test_packed_state.py`` holds
its digest).
"""

# ruff: noqa: E501

from __future__ import annotations

from typing import Final

DICTIONARY_V1: Final = "\n".join(
    (
        '"schema":"pi-workflows.workflow-message-content.v1","customType":"pi-workflows-presentation","content":"Continue in this Pi session.\\n',
        '"schema":"pi-workflows.session-binding.v1","runId":"","piSessionId":"","boundAt":"',
        '"schema":"pi-workflows.session-event.v1" "pi-workflows.session-capture.v1" "pi-workflows.terminal-result.v1" "pi-workflows.human-decision-receipt.v1"',
        '"session" "host" "controller" "channel" "human" "policy" "control" "system"',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run-tree-archive","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"settings-scope","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"effect","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"session-segment","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"decision","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-turn-reservation","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-message","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"follow-up","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"topic":"","state":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run-tree","actor":{"type":"session","id":""},"run_id":"","events":"","bundle":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run-tree","actor":{"type":"session","id":""},"run_id":"","run_ids":"","events":"","aggregates":"","bundle":"","bundle_sha256":"","removed_digests":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"settings","actor":{"type":"session","id":""},"run_id":"","scope_id":"","from_run_id":"","mount_path":"","invocation":"","change_number":"","settings_hash":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"settings","actor":{"type":"session","id":""},"run_id":"","scope_id":"","request_id":"","change_number":"","source":"","patch":"","patch_digest":"","before_hash":"","after_hash":"","settings":"","changed_paths":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"settings","actor":{"type":"session","id":""},"run_id":"","scope_id":"","origin_run_id":"","mount_path":"","invocation":"","policy":"","settings":"","settings_hash":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","update_id":"","seq":"","attempt_id":"","update_type":"","key":"","data":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"effect","actor":{"type":"session","id":""},"run_id":"","effect_id":"","attempt":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"effect","actor":{"type":"session","id":""},"run_id":"","effect_id":"","attempt":"","reason":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"effect","actor":{"type":"session","id":""},"run_id":"","effect_id":"","attempt":"","outcome":"","result":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"effect","actor":{"type":"session","id":""},"run_id":"","effect_id":"","attempt":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"effect","actor":{"type":"session","id":""},"run_id":"","effect_id":"","effect_type":"","key":"","request":"","request_digest":"","recovery":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"session","actor":{"type":"session","id":""},"run_id":"","segment_id":"","capture":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"session","actor":{"type":"session","id":""},"run_id":"","segment_id":"","first_seq":"","last_seq":"","records":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"session","actor":{"type":"session","id":""},"run_id":"","segment_id":"","entry_seq":"","entry_id":"","entry":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"session","actor":{"type":"session","id":""},"run_id":"","segment_id":"","attempt_id":"","session_id":"","binding":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","generation":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","generation":"","expires_at":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","owner_type":"","owner_id":"","generation":"","token_hash":"","lease_ms":"","expires_at":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"decision","actor":{"type":"session","id":""},"run_id":"","decision_id":"","continuation_run_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"decision","actor":{"type":"session","id":""},"run_id":"","decision_id":"","provenance":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"decision","actor":{"type":"session","id":""},"run_id":"","decision_id":"","provenance":"","submission_id":"","response":"","answer_digest":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"decision","actor":{"type":"session","id":""},"run_id":"","decision_id":"","submission_id":"","response":"","answer_digest":"","outcome":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"decision","actor":{"type":"session","id":""},"run_id":"","decision_id":"","node_id":"","attempt_id":"","request":"","request_digest":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-turn","actor":{"type":"session","id":""},"run_id":"","workflow_turn_id":"","workflow_message_id":"","target_session_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-turn","actor":{"type":"session","id":""},"run_id":"","workflow_turn_id":"","workflow_message_id":"","stop_reason":"","response_session_entry_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-turn","actor":{"type":"session","id":""},"run_id":"","workflow_turn_id":"","workflow_message_id":"","target_session_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-message","actor":{"type":"session","id":""},"run_id":"","workflow_message_id":"","kind":"","source_id":"","target_session_id":"","pi_session_entry_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-message","actor":{"type":"session","id":""},"run_id":"","workflow_message_id":"","kind":"","source_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"workflow-message","actor":{"type":"session","id":""},"run_id":"","workflow_message_id":"","target_session_id":"","kind":"","source_id":"","content":"","content_digest":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"follow-up","actor":{"type":"session","id":""},"run_id":"","follow_up_id":"","ended_run_id":"","status":"","reason":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"follow-up","actor":{"type":"session","id":""},"run_id":"","follow_up_id":"","source":"","reason":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"follow-up","actor":{"type":"session","id":""},"run_id":"","follow_up_id":"","request_id":"","order":"","target_session_id":"","source":"","prompt":"","workflow_message_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","continuation_run_id":"","status":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","child_run_id":"","workflow_message_id":"","workflow_turn_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","status":"","final_output":"","error":"","status_detail":"","interrupted":"","terminal_message_id":"","terminal_fingerprint":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","follow_up_id":"","order":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","instructions":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","status_detail":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","status":"","current_node":"","current_attempt_id":"","waiting_on":"","status_detail":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","session_id":"","execution_mode":',
        '{"timestamp":"2026-01-01T00:00:00.000000+00:00","originator_topic":"run","actor":{"type":"session","id":""},"run_id":"","workflow_name":"","workflow_ref":"","title":"","input":"","status":"","parent_run_id":"","root_run_id":"","lineage_kind":"","restart_number":"","parent_terminal_fingerprint":"","human_decision":',
        '"content":{"schema":"pi-workflows.workflow-message-content.v1","customType":"pi-workflows-follow-up","content":"","display":true,"details":{"workflowMessageId":"workflow-message-","followUpId":"follow-up-","runId":"","kind":"followUp"},"triggerTurn":true},"content_digest":"',
    )
).encode()
