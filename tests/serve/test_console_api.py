"""The console's JSON routes through a real server, on memory, SQLite and PostgreSQL.

The store holds the demo's story (``runledger demo``): a review run, its continuation child
(which recorded a session, applied an effect, collected follow-ups and failed) and the
restart that succeeded. Every answer is compared with what the store's own API says.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from runledger.domain.values import Actor
from runledger.infrastructure import open_store, verify_bundle
from runledger.infrastructure.cli.demo_story import TEST_FAILURE
from tests.serve.conftest import TOKEN, EventStream, Served, serving, started_run
from tests.serve.console_story import play_demo


def get(served: Served, path: str, **params: Any) -> Any:
    response = served.api.client.get(path, params=params)
    assert response.status_code == 200, response.text
    return response.json()


def overview(served: Served, run_id: str) -> Any:
    return get(served, f"/console/api/runs/{quote(run_id, safe='')}/overview")


# -- the runs list ---------------------------------------------------------------------------


def test_the_runs_list_is_newest_first_with_counts_by_status(served: Served) -> None:
    demo = play_demo(served.store)

    page = get(served, "/console/api/runs")

    ids = demo.ids
    assert [run["run_id"] for run in page["runs"]] == [
        demo.restart_run,
        ids.continuation_run,
        ids.review_run,
    ]
    assert page["counts"] == {
        "queued": 0,
        "running": 0,
        "waiting": 0,
        "completed": 2,
        "failed": 1,
        "timed_out": 0,
        "cancelled": 0,
    }
    assert page["next_before"] is None
    assert page["position"] == served.store.event_log(after=0, limit=1000)[-1].position


def test_the_runs_list_filters_by_status_workflow_session_root_and_id(served: Served) -> None:
    demo = play_demo(served.store)
    served.store.create_run("other-root", workflow_name="echo", input={})
    ids = demo.ids

    def listed(**params: Any) -> list[str]:
        return [run["run_id"] for run in get(served, "/console/api/runs", **params)["runs"]]

    assert listed(status="failed") == [ids.continuation_run]
    assert listed(workflow="echo") == ["other-root"]
    assert listed(session=ids.session) == [demo.restart_run, ids.continuation_run, ids.review_run]
    assert listed(root="other-root") == ["other-root"]
    assert listed(id=ids.review_run) == [ids.review_run]
    assert listed(workflow="code-review", status="completed") == [
        demo.restart_run,
        ids.review_run,
    ]
    assert get(served, "/console/api/runs", workflow="echo")["counts"]["running"] == 1
    assert get(served, "/console/api/runs", status="failed")["counts"] == {"failed": 1}


def test_the_runs_list_pages_back_in_time_by_keyset(served: Served) -> None:
    for number in range(1, 8):
        served.store.create_run(f"run-{number}", workflow_name="echo", input={})

    first = get(served, "/console/api/runs", limit=3)
    second = get(served, "/console/api/runs", limit=3, before=first["next_before"])
    third = get(served, "/console/api/runs", limit=3, before=second["next_before"])

    pages = [[run["run_id"] for run in page["runs"]] for page in (first, second, third)]
    assert pages == [["run-7", "run-6", "run-5"], ["run-4", "run-3", "run-2"], ["run-1"]]
    assert third["next_before"] is None


def test_the_runs_list_refuses_a_bad_page_or_an_unknown_cursor(served_memory: Served) -> None:
    client = served_memory.api.client

    too_many = client.get("/console/api/runs", params={"limit": 5000})
    unknown = client.get("/console/api/runs", params={"before": "no-such-run"})
    typo = client.get("/console/api/runs", params={"stauts": "failed"})
    status = client.get("/console/api/runs", params={"status": "done"})

    assert (too_many.status_code, too_many.json()["code"]) == (422, "request.invalid")
    assert (unknown.status_code, unknown.json()["code"]) == (422, "query.unknown-run-cursor")
    assert (typo.status_code, typo.json()["code"]) == (422, "request.invalid")
    assert (status.status_code, status.json()["code"]) == (422, "run.invalid-status")


# -- one run ---------------------------------------------------------------------------------


def test_a_run_overview_holds_the_demo_childs_whole_picture(served: Served) -> None:
    demo = play_demo(served.store)
    child = demo.ids.continuation_run
    store = served.store

    answer = overview(served, child)

    run = answer["run"]
    assert (run["status"], run["error"], run["input"]) == (
        "failed",
        TEST_FAILURE,
        {"repository": "acme/payments-api", "pull_request": 42},
    )
    lineage = {summary["run_id"]: summary["parent_run_id"] for summary in answer["lineage"]}
    review = demo.ids.review_run
    assert lineage == {review: None, child: review, demo.restart_run: child}
    (effect,) = answer["effects"]
    assert (effect["effect_type"], effect["status"], effect["result"]) == (
        "status-check",
        "applied",
        {"state": "pending"},
    )
    kinds = [(m["message"]["kind"], m["message"]["status"]) for m in answer["messages"]]
    assert kinds == [
        ("followUp", "cancelled"),
        ("followUp", "cancelled"),
        ("followUp", "cancelled"),
        ("terminal", "sent"),
    ]
    terminal = answer["messages"][-1]
    assert [(t["state"], t["stop_reason"]) for t in terminal["turns"]] == [("ended", "completed")]
    (scope,) = answer["settings"]
    assert scope["scope"]["settings"] == {"strictness": "strict", "notes": []}
    # The change was made on the parent, before the scope moved here with the continuation.
    (change,) = scope["changes"]
    assert (change["actor"], change["source"], change["changed_paths"]) == (
        {"type": "human", "id": "reviewer"},
        "interactive-command",
        ["/strictness"],
    )
    (segment,) = answer["segments"]
    assert (segment["status"], segment["entry_count"], segment["event_count"]) == ("complete", 1, 2)
    assert [entry["entry_id"] for entry in answer["session_entries"]] == ["run-tests"]
    assert [event["type"] for event in answer["session_events"]] == [
        "turn_started",
        "turn_finished",
    ]
    logged = store.event_log(after=0, limit=1000, run_id=child)
    own = [event for event in logged if event.payload["run_id"] == child]
    assert sum(answer["wire_names"].values()) == len(own)
    assert answer["wire_names"]["follow-up.queued"] == 3
    assert answer["decisions"] == []
    assert answer["lease"] is None


def test_a_run_overview_shows_its_decisions_and_its_lease(served: Served) -> None:
    demo = play_demo(served.store)
    started_run(served.api, "leased")
    claim = served.store.claim_run(
        "leased", owner_type="controller", owner_id="w-1", lease_ms=60_000
    )
    assert claim is not None

    review = overview(served, demo.ids.review_run)
    leased = overview(served, "leased")

    (decision,) = review["decisions"]
    assert (decision["status"], decision["request"]["choices"], decision["provenance"]) == (
        "accepted",
        ["approve", "revise"],
        "human",
    )
    assert decision["continuation_run_id"] == demo.ids.continuation_run
    lease = leased["lease"]
    assert (lease["owner_type"], lease["owner_id"], lease["generation"]) == ("controller", "w-1", 1)
    assert datetime.fromisoformat(lease["expires_at"]) == claim.expires_at
    assert lease["released_at"] is None
    assert "token" not in str(leased["lease"]).lower()

    served.store.release_claim(claim)

    assert overview(served, "leased")["lease"]["released_at"] is not None


def test_an_unknown_run_answers_404_run_not_found(served_memory: Served) -> None:
    client = served_memory.api.client

    answers = [
        client.get(f"/console/api/runs/no-such-run/{route}") for route in ("overview", "events")
    ]

    assert [(a.status_code, a.json()["code"]) for a in answers] == [(404, "run.not-found")] * 2


def test_the_event_history_pages_and_filters_by_wire_name(served: Served) -> None:
    demo = play_demo(served.store)
    child = demo.ids.continuation_run
    own = [
        e
        for e in served.store.event_log(after=0, limit=1000, run_id=child)
        if e.payload["run_id"] == child
    ]
    path = f"/console/api/runs/{child}/events"

    first = get(served, path, limit=5)
    rest = get(served, path, after=first["next_after"], limit=1000)
    queued = get(served, path, wire_name="follow-up.queued")

    positions = [e["position"] for e in first["events"] + rest["events"]]
    assert positions == [e.position for e in own]
    assert rest["next_after"] is None
    assert [e["payload"]["prompt"] for e in queued["events"]] == [
        e.payload["prompt"] for e in own if e.wire_name == "follow-up.queued"
    ]


def test_the_bundle_downloads_as_audit_export_writes_it(served: Served, tmp_path: Path) -> None:
    demo = play_demo(served.store)
    child = demo.ids.continuation_run

    response = served.api.client.get(f"/console/api/runs/{child}/bundle")
    path = tmp_path / "downloaded.jsonl"
    path.write_bytes(response.content)

    assert response.status_code == 200
    assert response.headers["content-disposition"] == (
        f'attachment; filename="{child}.bundle.jsonl"'
    )
    verdict = verify_bundle(path)
    assert verdict.ok, verdict


# -- access, files and the feed --------------------------------------------------------------


def test_access_says_whether_the_token_may_write(shared_host: Any) -> None:
    for served in serving(shared_host, "memory://", public_reads=True):
        with_token = get(served, "/console/api/access")
        anonymous = served.anonymous.get("/console/api/access")
        assert with_token == {"reads": True, "writes": True}
        assert anonymous.json() == {"reads": True, "writes": False}


def test_every_console_data_route_needs_the_token(served_memory: Served) -> None:
    started_run(served_memory.api)
    paths = [
        "/console/api/access",
        "/console/api/runs",
        "/console/api/feed",
        "/console/api/runs/run-1/overview",
        "/console/api/runs/run-1/events",
        "/console/api/runs/run-1/bundle",
    ]

    statuses = {path: served_memory.anonymous.get(path).status_code for path in paths}

    assert statuses == dict.fromkeys(paths, 401)


def test_the_page_and_its_files_are_served_without_a_token(served_memory: Served) -> None:
    client = served_memory.anonymous

    page = client.get("/console/runs/some-run")
    script = client.get("/static/console.js")
    style = client.get("/static/console.css")
    missing = [client.get(f"/static/{name}") for name in ("nope.js", "..%2Fapp.py", "app.py")]

    assert page.status_code == 200
    assert '<script type="module" src="/static/console.js">' in page.text
    assert script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert style.headers["content-type"] == "text/css; charset=utf-8"
    assert [response.status_code for response in missing] == [404, 404, 404]


def test_the_runs_feed_sends_new_runs_and_status_changes(served: Served) -> None:
    started_run(served.api)
    position = get(served, "/console/api/runs")["position"]
    client = httpx.Client(base_url=served.base_url, headers={"Authorization": f"Bearer {TOKEN}"})
    with client, client.stream("GET", "/console/api/feed", params={"after": position}) as response:
        stream = EventStream(response)
        stream.wait_open()
        served.store.create_run("run-2", workflow_name="echo", input={})
        created = stream.next()
        served.store.finish_run("run-1", status="completed", final_output={"ok": True})
        finished = stream.next()

    assert created.name == "runs"
    assert [(r["run_id"], r["status"]) for r in created.data["runs"]] == [("run-2", "running")]
    assert [(r["run_id"], r["status"]) for r in finished.data["runs"]] == [("run-1", "completed")]
    assert finished.data["position"] > created.data["position"] > position


def test_the_runs_feed_catches_up_from_an_old_position(served_memory: Served) -> None:
    store = served_memory.store
    store.create_run("run-1", workflow_name="echo", input={})
    store.create_run("run-2", workflow_name="echo", input={})
    store.finish_run("run-1", status="cancelled", error="stopped")
    client = served_memory.api.client

    with client.stream("GET", "/console/api/feed", params={"after": 0}) as response:
        stream = EventStream(response)
        first = stream.next()

    assert {(r["run_id"], r["status"]) for r in first.data["runs"]} == {
        ("run-1", "cancelled"),
        ("run-2", "running"),
    }


def test_a_decision_answered_through_the_api_continues_the_run(served_memory: Served) -> None:
    # The console's answer form posts exactly this body.
    store = served_memory.store
    started_run(served_memory.api)
    decision = store.request_human_decision(
        "run-1", node_id="ask", attempt_id="ask-1", request={"title": "Go?", "choices": ["go"]}
    )
    body = {
        "actor": {"type": "human", "id": "operator"},
        "response": {"choice": "go"},
        "submission_id": "console-1",
    }

    answer = served_memory.api.client.post(f"/decisions/{decision.decision_id}/answers", json=body)

    assert answer.status_code == 200, answer.text
    assert overview(served_memory, "run-1")["decisions"][0]["submissions"][0]["actor"] == (
        Actor("human", "operator").to_json()
    )


@pytest.mark.parametrize("limit", ["0", "x", "1001"])
def test_the_event_history_refuses_a_bad_limit(served_memory: Served, limit: str) -> None:
    started_run(served_memory.api)

    answer = served_memory.api.client.get("/console/api/runs/run-1/events", params={"limit": limit})

    assert (answer.status_code, answer.json()["code"]) == (422, "request.invalid")


def test_the_runs_feed_sends_runs_another_store_created(
    served_durable: Served, durable_serve_url: str
) -> None:
    position = get(served_durable, "/console/api/runs")["position"]
    client = served_durable.api.client
    with (
        open_store(durable_serve_url) as other,
        client.stream("GET", "/console/api/feed", params={"after": position}) as response,
    ):
        stream = EventStream(response)
        stream.wait_open()
        other.create_run("elsewhere", workflow_name="echo", input={})
        other.finish_run("elsewhere", status="failed", error="boom")
        seen: list[tuple[str, str]] = []
        while ("elsewhere", "failed") not in seen:
            seen.extend((r["run_id"], r["status"]) for r in stream.next().data["runs"])

    assert seen[-1] == ("elsewhere", "failed")
    assert set(seen) <= {("elsewhere", "running"), ("elsewhere", "failed")}
