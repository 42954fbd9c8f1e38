"""The JSON API mirrors the Python API one to one, on every backend, through a real server.

Each test calls routes by their store method's name (``api.ok("queue_follow_up", ...)``);
``test_routes.py`` checks that every route of the table is called by one of these tests.
"""

from __future__ import annotations

from typing import Any

from runledger.domain.ids import workflow_message_id_for
from tests.serve.conftest import Api, Served, queue_follow_up, started_run
from tests.support.scenario import notification_content
from tests.support.sessions import session_binding, session_capture, session_events

HUMAN = {"type": "human", "id": "user-1"}
POLICY = {"rules": [{"path": "/mode", "permissions": {"human": ["read", "replace"]}}]}
DECISION = {"title": "Ship the release?", "choices": ["ship", "hold"]}


def deliver(api: Api, message_id: str, entry_id: str = "entry-1") -> Any:
    return api.ok(
        "report_branch",
        "session-1",
        entries=[[message_id, entry_id]],
        allowed_ids=[message_id],
    )


# -- runs ------------------------------------------------------------------------------------


def test_a_run_is_created_bound_and_read_back_in_snake_case(served: Served) -> None:
    api = served.api

    created = api.ok("create_run", run_id="run-1", workflow_name="echo", input={"task": "x"})
    bound = api.ok("bind_origin_session", "run-1", session_id="session-1")

    assert (created["run_id"], created["status"], created["origin_session_id"]) == (
        "run-1",
        "running",
        None,
    )
    assert bound["origin_session_id"] == "session-1"
    assert api.ok("get_run", "run-1") == bound
    assert served.store.get_run("run-1").model_dump(mode="json") == bound  # type: ignore[union-attr]


def test_a_run_moves_through_progress_pause_resume_and_its_end(served: Served) -> None:
    api = served.api
    started_run(api)

    running = api.ok("record_progress", "run-1", status="running", current_node="ask")
    waiting = api.ok("record_progress", "run-1", status="waiting", waiting_on="human")
    paused = api.ok("pause_run", "run-1", status_detail="lunch")
    resumed = api.ok("resume_run", "run-1")
    api.ok("set_presentation_instructions", "run-1", instructions="Say it briefly.")
    update = api.ok(
        "publish_update", "run-1", attempt_id="a-1", update_type="progress", key="k", data=1
    )
    finished = api.ok("finish_run", "run-1", status="completed", final_output={"ok": True})

    assert running["current_node"] == "ask"
    assert (waiting["status"], waiting["waiting_on"]) == ("waiting", "human")
    assert (paused["paused"], resumed["paused"]) == (True, False)
    assert (update["key"], update["data"]) == ("k", 1)
    assert finished["status"] == "completed"
    assert api.ok("terminal_data", "run-1")["status"] == "completed"


def test_an_interrupted_run_fails_with_the_host_reason(served: Served) -> None:
    started_run(served.api)

    interrupted = served.api.ok("interrupt_run", "run-1")

    assert (interrupted["status"], interrupted["error"]) == (
        "failed",
        "Workflow host stopped before the run finished",
    )


def test_the_runs_list_pages_by_its_cursor(served: Served) -> None:
    api = served.api
    for run_id in ("run-1", "run-2", "run-3"):
        api.ok("create_run", run_id=run_id, workflow_name="echo", input={})

    first = api.ok("list_runs", limit=2)
    rest = api.ok("list_runs", limit=2, after=first["next_after"])

    assert [run["run_id"] for run in first["runs"]] == ["run-1", "run-2"]
    assert [run["run_id"] for run in rest["runs"]] == ["run-3"]
    assert rest["next_after"] is None


# -- follow-ups ------------------------------------------------------------------------------


def test_a_queued_follow_up_shows_in_the_queue_and_its_range(served: Served) -> None:
    api = served.api
    started_run(api)

    queued = queue_follow_up(api, "run-1", "request-1", "first")
    queue_follow_up(api, "run-1", "request-2", "second")
    again = queue_follow_up(api, "run-1", "request-1", "first")

    follow_up_id = queued["follow_up"]["follow_up_id"]
    assert (queued["adopted"], again["adopted"]) == (False, True)
    assert api.ok("get_follow_up", follow_up_id)["prompt"] == "first"
    queue = api.ok("follow_up_queue", "run-1")
    assert [item["prompt"] for item in queue["follow_ups"]] == ["first", "second"]
    page = api.ok("follow_up_queue_range", "run-1", start=1, limit=5)
    assert [item["prompt"] for item in page["follow_ups"]] == ["second"]


def test_a_removed_follow_up_leaves_the_queue_in_state_removed(served: Served) -> None:
    api = served.api
    started_run(api)
    follow_up_id = queue_follow_up(api, "run-1", "request-1")["follow_up"]["follow_up_id"]

    removed = api.ok(
        "remove_follow_up",
        "run-1",
        follow_up_id,
        actor={"type": "session", "id": "session-1"},
        source="chat",
    )

    assert removed["state"] == "removed"


# -- workflow messages, turns, the outbox and restarts ---------------------------------------


def test_a_host_message_is_delivered_through_branch_evidence(served: Served) -> None:
    api = served.api
    started_run(api)
    content = notification_content("notification-1", "1", run_id="run-1")

    created = api.ok(
        "create_workflow_message",
        "run-1",
        kind="notification",
        source_id="notification-1",
        idempotency_key="1",
        content=content,
    )
    message_id = created["workflow_message_id"]
    assert message_id == workflow_message_id_for("notification", "notification-1", "1")
    assert api.ok("next_deliverable", "session-1")["workflow_message_id"] == message_id

    [sent] = deliver(api, message_id)

    assert sent["status"] == "sent"
    assert api.ok("get_workflow_message", message_id)["status"] == "sent"
    assert [m["status"] for m in api.ok("session_outbox", "session-1")] == ["sent"]
    assert api.ok("next_deliverable", "session-1") is None


def test_a_failed_run_restarts_from_its_ended_terminal_turn(served: Served) -> None:
    api = served.api
    started_run(api)
    api.ok("finish_run", "run-1", status="failed", error="boom")
    [terminal] = [m for m in api.ok("session_outbox", "session-1") if m["kind"] == "terminal"]
    deliver(api, terminal["workflow_message_id"])

    turn = api.ok(
        "start_turn",
        terminal["workflow_message_id"],
        run_id="run-1",
        target_session_id="session-1",
        workflow_turn_id="turn-1",
    )
    ended = api.ok("end_turn", "turn-1", stop_reason="completed")
    receipt = api.ok(
        "restart_run",
        "run-1",
        session_id="session-1",
        workflow_message_id=terminal["workflow_message_id"],
        workflow_turn_id="turn-1",
    )

    assert (turn["state"], ended["state"]) == ("started", "ended")
    assert api.ok("get_turn", "turn-1") == ended
    assert (receipt["parent_run_id"], receipt["restart_number"]) == ("run-1", 1)


# -- settings --------------------------------------------------------------------------------


def test_a_settings_scope_changes_under_its_policy(served: Served) -> None:
    api = served.api
    started_run(api)
    scope = api.ok("ensure_settings_scope", "run-1", settings={"mode": "a"}, policy=POLICY)

    changed = api.ok(
        "change_settings",
        "run-1",
        scope["scope_id"],
        request_id="change-1",
        actor=HUMAN,
        source="ui",
        patch=[{"op": "replace", "path": "/mode", "value": "b"}],
    )

    assert changed["scope"]["settings"] == {"mode": "b"}
    assert [s["settings"] for s in api.ok("settings_scopes", "run-1")] == [{"mode": "b"}]
    before = api.ok("settings_scope_at_change", scope["scope_id"], 0)
    assert before["settings"] == {"mode": "a"}


def test_ids_with_slashes_reach_their_routes(served_memory: Served) -> None:
    api = served_memory.api
    api.ok("create_run", run_id="run-1", workflow_name="echo", input={})
    api.ok("bind_origin_session", "run-1", session_id="pi/session 1?x")
    scope = api.ok(
        "ensure_settings_scope",
        "run-1",
        mount_path="review/step",
        settings={"mode": "a"},
        policy=POLICY,
    )

    changed = api.ok(
        "change_settings",
        "run-1",
        scope["scope_id"],
        request_id="change-1",
        actor=HUMAN,
        source="ui",
        patch=[{"op": "replace", "path": "/mode", "value": "b"}],
    )

    assert scope["scope_id"] == "run-1:review/step:1"
    assert changed["scope"]["change_number"] == 1
    assert api.ok("settings_scope_at_change", scope["scope_id"], 1)["settings"] == {"mode": "b"}
    assert api.ok("session_outbox", "pi/session 1?x") == []


# -- human decisions -------------------------------------------------------------------------


def test_an_answered_decision_continues_the_run(served: Served) -> None:
    api = served.api
    started_run(api)
    decision = api.ok(
        "request_human_decision", "run-1", node_id="approve", attempt_id="a-1", request=DECISION
    )

    submission = api.ok(
        "answer_human_decision",
        decision["decision_id"],
        actor=HUMAN,
        response={"choice": "ship"},
        submission_id="submission-1",
    )
    child = api.ok("continue_after_decision", decision["decision_id"])

    assert submission["outcome"] == "won"
    assert api.ok("get_human_decision", decision["decision_id"])["status"] == "accepted"
    assert (child["parent_run_id"], child["lineage_kind"]) == ("run-1", "continuation")


def test_a_decision_is_cancelled_and_its_timeout_refused_before_the_deadline(
    served: Served,
) -> None:
    api = served.api
    started_run(api)
    later = {**DECISION, "expiresAt": "2999-01-01T00:00:00+00:00"}
    decision = api.ok(
        "request_human_decision", "run-1", node_id="approve", attempt_id="a-2", request=later
    )

    early = api.call("apply_decision_timeout", decision["decision_id"])
    cancelled = api.ok("cancel_human_decision", decision["decision_id"])

    assert (early.status_code, early.json()["code"]) == (409, "decision.timeout-not-eligible")
    assert cancelled["status"] == "cancelled"


# -- run leases ------------------------------------------------------------------------------


def test_a_claimed_run_takes_writes_with_its_claim_as_authority(served: Served) -> None:
    api = served.api
    started_run(api)

    claim = api.ok("claim_run", "run-1", owner_type="host", owner_id="worker-1")
    fenced = api.call("record_progress", "run-1", status="running")
    renewed = api.ok("renew_claim", claim=claim, lease_ms=60000)
    progressed = api.ok("record_progress", "run-1", status="running", authority=renewed)
    released = api.ok("release_claim", claim=renewed)

    assert (fenced.status_code, fenced.json()["code"]) == (409, "lease.claim-lost")
    assert progressed["status"] == "running"
    assert released is None
    assert api.ok("claim_run", "run-1", owner_type="host", owner_id="worker-2") is not None


# -- session recording -----------------------------------------------------------------------


def test_a_recorded_session_reads_back_in_pages(served: Served) -> None:
    api = served.api
    started_run(api)

    api.ok("record_session_binding", "run-1", binding=session_binding("run-1", "session-1"))
    seq = api.ok("append_session_entry", "run-1", entry={"id": "e-1", "role": "user"})
    api.ok("append_session_events", "run-1", records=session_events(1, 3))
    api.ok("update_session_capture", "run-1", capture=session_capture("recording", 1, 3))

    assert seq == 1
    assert [e["entry"] for e in api.ok("session_entries", "run-1")] == [
        {"id": "e-1", "role": "user"}
    ]
    assert [e["seq"] for e in api.ok("session_events", "run-1", start=1, limit=5)] == [2, 3]
    [segment] = api.ok("session_segments", "run-1")
    assert segment["integrity"] == "valid"


# -- managed effects -------------------------------------------------------------------------


def test_an_effect_is_reserved_failed_retried_and_recovered(served: Served) -> None:
    api = served.api
    started_run(api)
    request = {"to": "a@example.com", "recovery": "idempotent"}

    reserved = api.ok("reserve_effect", "run-1", effect_type="email", key="k", request=request)
    effect_id = reserved["effect"]["effect_id"]
    failed = api.ok("settle_effect", effect_id, attempt=1, outcome="failed")
    retried = api.ok("retry_effect", effect_id)
    again = api.ok("reserve_effect", "run-1", effect_type="email", key="k", request=request)
    verdict = api.ok("recover_applying_effects", "run-1")

    assert (reserved["outcome"], failed["status"], retried["status"]) == (
        "new",
        "failed",
        "retry_ready",
    )
    assert again["outcome"] == "new_attempt"
    assert verdict == "safe"
    assert api.ok("get_effect", effect_id)["status"] == "retry_ready"


# -- the event log and the projections -------------------------------------------------------


def test_the_event_log_and_projection_status_are_read(served: Served) -> None:
    api = served.api
    started_run(api)
    queue_follow_up(api, "run-1", "request-1")

    log = api.ok("event_log", run_id="run-1")
    deltas = api.ok("viewer_deltas", "run-1", after_revision=1)

    assert [event["wire_name"] for event in log][:2] == ["run.created", "run.session-bound"]
    assert "follow-up.queued" in {event["wire_name"] for event in log}
    assert deltas["kind"] == "deltas"
    assert {p["name"] for p in api.ok("projection_status")} == set(api.ok("projection_names"))


def test_a_read_model_digest_is_read_now_and_as_of_a_position(served: Served) -> None:
    api = served.api
    started_run(api)
    before = api.ok("read_model_digest", "follow_up_queue")
    position = api.ok("event_log")[-1]["position"]
    queue_follow_up(api, "run-1", "request-1")

    after = api.ok("read_model_digest", "follow_up_queue")
    then = api.ok("read_model_digest", "follow_up_queue", as_of=position)

    assert after != before
    assert then == before


def test_a_run_is_audited_and_verified(served: Served) -> None:
    api = served.api
    started_run(api)
    queue_follow_up(api, "run-1", "request-1")

    trail = api.ok("audit_run", "run-1", lineage=True)
    verdict = api.ok("verify_run", "run-1")

    wire_names = [entry["wire_name"] for entry in trail["entries"]]
    assert wire_names[:2] == ["run.created", "run.session-bound"]
    assert "follow-up.queued" in wire_names
    assert trail["runs"] == ["run-1"]
    assert verdict["ok"] is True
    assert verdict["difference"] is None
    assert verdict["events"] == len(wire_names)
