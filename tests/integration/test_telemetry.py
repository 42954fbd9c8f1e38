"""Spans and metrics of commands, queries, catch-ups and rebuilds, collected with the SDK's
in-memory exporter and reader, on memory, a SQLite file and PostgreSQL."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest

from runledger.domain.errors import RunMissingError
from runledger.domain.values import Actor
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.telemetry import (
    BACKEND,
    CATCH_UP_SPAN,
    COMMAND_SPAN,
    COMMIT_SPAN,
    CONFLICT,
    EVENT_NAME,
    GROUP_SIZE,
    NAME,
    OUTCOME,
    PAGE_SPAN,
    PROJECTION,
    QUERY_SPAN,
    READ_MODELS_SPAN,
    REBUILD_SPAN,
    RETRIES,
    RUN_ID,
    SAME_COMMIT,
    STORE,
    TELEMETRY,
    VERIFY_SPAN,
)
from tests.support.clock import FakeClock
from tests.support.telemetry import Collected, children_of, telemetry

__all__ = ["telemetry"]

SESSION = "session-1"
ACTOR = Actor(type="session", id=SESSION)


def started(store: WorkflowStore, run_id: str = "run-1") -> None:
    store.create_run(run_id, workflow_name="echo", input={})
    store.bind_origin_session(run_id, SESSION)
    store.record_progress(run_id, status="running")


def queue(store: WorkflowStore, request_id: str, run_id: str = "run-1") -> None:
    store.queue_follow_up(
        run_id,
        request_id=request_id,
        target_session_id=SESSION,
        actor=ACTOR,
        source="telemetry-test",
        prompt=f"prompt of {request_id}",
    )


def test_a_command_span_is_a_child_of_the_hosts_span_with_its_commit_and_read_models(
    store: WorkflowStore, runtime: StoreRuntime, telemetry: Collected
) -> None:
    with telemetry.tracer.start_as_current_span("host request") as host:
        store.create_run("run-1", workflow_name="echo", input={})

    [command] = telemetry.spans(COMMAND_SPAN)
    assert command.parent is not None
    assert command.parent.span_id == host.get_span_context().span_id
    assert command.context.trace_id == host.get_span_context().trace_id
    assert dict(command.attributes or {}) == {
        NAME: "create_run",
        BACKEND: runtime.backend,
        RUN_ID: "run-1",
        OUTCOME: "ok",
        RETRIES: 0,
        CONFLICT: False,
    }
    # Its read models were written in the commit: the commit span says so, no other step.
    [commit] = children_of(command, telemetry.spans())
    assert commit.name == COMMIT_SPAN
    assert dict(commit.attributes or {}) == {GROUP_SIZE: 1, SAME_COMMIT: True}


def test_read_models_not_written_with_the_events_get_a_read_model_span_of_their_own(
    store: WorkflowStore, runtime: StoreRuntime, telemetry: Collected
) -> None:
    taken, release = threading.Event(), threading.Event()

    def hold_the_projector() -> None:
        with runtime.projector.paused():
            taken.set()
            release.wait(timeout=30)

    holder = threading.Thread(target=hold_the_projector)
    holder.start()
    taken.wait(timeout=30)
    try:
        store.create_run("run-1", workflow_name="echo", input={})
    finally:
        release.set()
        holder.join()

    [command] = telemetry.spans(COMMAND_SPAN)
    children = children_of(command, telemetry.spans())
    assert [span.name for span in children] == [COMMIT_SPAN, READ_MODELS_SPAN]
    assert [(span.attributes or {})[SAME_COMMIT] for span in children] == [False, False]


def test_a_rejected_command_span_and_metric_carry_its_error_code(
    store: WorkflowStore, telemetry: Collected
) -> None:
    with pytest.raises(RunMissingError):
        store.pause_run("no-such-run")

    [command] = telemetry.spans(COMMAND_SPAN)
    assert (command.attributes or {})[OUTCOME] == RunMissingError.code
    assert command.status.description == RunMissingError.code
    assert children_of(command, telemetry.spans()) == []
    counted = {(a[NAME], a[OUTCOME]): p.value for a, p in telemetry.points("runledger.commands")}
    assert counted == {("pause_run", RunMissingError.code): 1}


def test_queries_have_query_spans_and_every_call_is_counted_and_timed(
    store: WorkflowStore, telemetry: Collected
) -> None:
    started(store)
    queue(store, "follow-1")

    store.get_run("run-1")
    store.follow_up_queue("run-1")

    queries = [(s.attributes or {})[NAME] for s in telemetry.spans(QUERY_SPAN)]
    assert queries == ["get_run", "follow_up_queue"]
    counted = {a[NAME]: p.value for a, p in telemetry.points("runledger.commands")}
    assert counted == {
        "create_run": 1,
        "bind_origin_session": 1,
        "record_progress": 1,
        "queue_follow_up": 1,
        "get_run": 1,
        "follow_up_queue": 1,
    }
    timed = {a[NAME]: p.count for a, p in telemetry.points("runledger.command.duration")}
    assert timed == counted
    appended = {a[EVENT_NAME]: p.value for a, p in telemetry.points("runledger.events.appended")}
    assert appended["run.created"] == 1
    assert appended["follow-up.queued"] == 1
    [group] = [p for _, p in telemetry.points("runledger.commit.group_size")]
    assert group.count == 4
    assert group.sum == 4


def test_calls_from_many_threads_are_each_counted_once_and_counts_restart_with_a_new_sdk(
    store: WorkflowStore, telemetry: Collected
) -> None:
    started(store)
    threads, calls = 4, 50
    barrier = threading.Barrier(threads)

    def read() -> None:
        barrier.wait()
        for _ in range(calls):
            store.get_run("run-1")

    workers = [threading.Thread(target=read) for _ in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    for number in range(3):
        queue(store, f"follow-{number}")

    counted = {a[NAME]: p.value for a, p in telemetry.points("runledger.commands")}
    assert counted["get_run"] == threads * calls
    assert counted["queue_follow_up"] == 3
    # Cumulative: a second collection reads the same totals.
    again = {a[NAME]: p.value for a, p in telemetry.points("runledger.commands")}
    assert again == counted
    appended = {a[EVENT_NAME]: p.value for a, p in telemetry.points("runledger.events.appended")}
    assert appended["follow-up.queued"] == 3

    fresh = Collected()
    TELEMETRY.configure(fresh.tracer_provider, fresh.meter_provider)
    try:
        store.get_run("run-1")
        counted = {a[NAME]: p.value for a, p in fresh.points("runledger.commands")}
        assert counted == {"get_run": 1}
        assert fresh.points("runledger.events.appended") == []
    finally:
        TELEMETRY.configure(telemetry.tracer_provider, telemetry.meter_provider)
        fresh.close()


def test_a_catch_up_has_a_span_per_page_of_the_log(store_url: str, telemetry: Collected) -> None:
    with open_runtime(store_url, embedded_projections=False) as runtime:
        store = WorkflowStore(runtime)
        started(store)
        for number in range(6):
            queue(store, f"follow-{number}")
        head = runtime.storage.max_position()
        runtime.projector.page_size = 4

        read = runtime.projector.catch_up()

    assert read == head
    [catch_up] = telemetry.spans(CATCH_UP_SPAN)
    pages = children_of(catch_up, telemetry.spans(PAGE_SPAN))
    assert len(pages) == -(-head // 4)
    covered = (
        [(page.attributes or {})["runledger.position.first"] for page in pages],
        [(page.attributes or {})["runledger.position.last"] for page in pages],
    )
    assert covered[0][0] == 1
    assert covered[1][-1] == head
    assert (catch_up.attributes or {})["runledger.events"] == head


def test_a_rebuild_has_a_span_with_progress_events_and_counts_what_it_replayed(
    store: WorkflowStore, runtime: StoreRuntime, telemetry: Collected
) -> None:
    started(store)
    queue(store, "follow-1")
    head = runtime.storage.max_position()

    runtime.rebuild_blue_green(["runs"], accept=True, drop_old=True)

    [rebuild] = telemetry.spans(REBUILD_SPAN)
    assert (rebuild.attributes or {})[PROJECTION] == ("runs",)
    progress = [dict(event.attributes or {}) for event in rebuild.events]
    assert progress
    assert progress[-1]["runledger.events"] == head
    [replayed] = [p.value for _, p in telemetry.points("runledger.rebuild.events")]
    assert replayed == head
    # The rebuild's pages are traced under it.
    spans = telemetry.spans()
    assert any(
        span.name == CATCH_UP_SPAN
        and span.parent
        and span.parent.span_id == rebuild.context.span_id
        for span in spans
    )


def lag_of(telemetry: Collected, runtime: StoreRuntime, metric: str) -> dict[str, float]:
    return {
        attributes[PROJECTION]: point.value
        for attributes, point in telemetry.points(metric)
        if attributes[STORE] == runtime.metrics_label
    }


def test_projection_lag_rises_while_the_worker_is_stopped_and_falls_to_zero_after_catch_up(
    store_url: str, telemetry: Collected
) -> None:
    clock = FakeClock()
    with open_runtime(store_url, clock=clock, embedded_projections=False) as runtime:
        store = WorkflowStore(runtime)
        runtime.projector.catch_up()
        assert set(lag_of(telemetry, runtime, "runledger.projection.lag.events").values()) == {0}

        started(store)
        queue(store, "follow-1")
        clock.advance(timedelta(seconds=90))

        behind = lag_of(telemetry, runtime, "runledger.projection.lag.events")
        seconds = lag_of(telemetry, runtime, "runledger.projection.lag.duration")
        head = runtime.storage.max_position()
        assert behind == dict.fromkeys(runtime.projection_names(), head)
        assert all(90 <= value < 100 for value in seconds.values()), seconds

        runtime.projector.catch_up()

        assert set(lag_of(telemetry, runtime, "runledger.projection.lag.events").values()) == {0}
        assert set(lag_of(telemetry, runtime, "runledger.projection.lag.duration").values()) == {0}
        assert set(lag_of(telemetry, runtime, "runledger.projection.stalled").values()) == {0}


def test_a_stalled_projection_is_reported_by_its_gauge(
    store: WorkflowStore,
    runtime: StoreRuntime,
    telemetry: Collected,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    projection = runtime.projector.runner("follow_up_queue").projection

    def broken(*_: object) -> None:
        raise RuntimeError("projection bug under test")

    monkeypatch.setattr(projection, "apply", broken)
    started(store)
    queue(store, "follow-1")

    stalled = lag_of(telemetry, runtime, "runledger.projection.stalled")
    assert stalled["follow_up_queue"] == 1
    assert {name for name, value in stalled.items() if value} == {"follow_up_queue"}


def test_pool_use_is_reported_for_the_durable_backends(
    durable_url: str, telemetry: Collected
) -> None:
    with open_runtime(durable_url) as runtime:
        started(WorkflowStore(runtime))
        used = {
            attributes["state"]: point.value
            for attributes, point in telemetry.points("runledger.pool.connection.count")
            if attributes[STORE] == runtime.metrics_label
        }
        assert set(used) == {"used", "idle"}
        assert used["used"] >= 0
        assert used["idle"] >= 1
        if runtime.backend.startswith("postgres"):
            waiting = [
                point.value
                for attributes, point in telemetry.points("runledger.pool.pending_requests")
                if attributes[STORE] == runtime.metrics_label
            ]
            assert waiting == [0]


def test_version_conflicts_show_as_retries_on_the_command_spans_and_in_the_metrics(
    durable_url: str, telemetry: Collected
) -> None:
    # Not on memory: threads conflicting on one run there can deadlock in main as of this
    # writing (a command holding the log's lock waits on a group leader waiting for it).
    with open_runtime(durable_url) as runtime:
        conflicted_on(WorkflowStore(runtime), runtime)
        conflicts = runtime.stats.conflicts

    commands = telemetry.spans(COMMAND_SPAN)
    retries = [int(str((span.attributes or {})[RETRIES])) for span in commands]
    assert sum(retries) == conflicts
    conflicted = [(span.attributes or {})[CONFLICT] for span in commands]
    assert conflicted == [count > 0 for count in retries]
    conflicted_commits = [
        span for span in telemetry.spans(COMMIT_SPAN) if (span.attributes or {}).get(CONFLICT)
    ]
    assert len(conflicted_commits) == conflicts
    [counted] = [p.value for _, p in telemetry.points("runledger.commit.conflicts")]
    assert counted == conflicts
    [retried] = [p.value for _, p in telemetry.points("runledger.command.retries")]
    assert retried == conflicts


def conflicted_on(store: WorkflowStore, runtime: StoreRuntime) -> None:
    """Four threads publishing on one run, round after round, until one conflicted."""
    started(store)
    rounds = 0
    while runtime.stats.conflicts == 0:
        rounds += 1
        assert rounds <= 20, "four threads on one run never conflicted"
        barrier = threading.Barrier(4)

        def publish(
            thread: int, round_number: int = rounds, barrier: threading.Barrier = barrier
        ) -> None:
            barrier.wait()
            for number in range(10):
                store.publish_update(
                    "run-1",
                    attempt_id="attempt-1",
                    update_type="progress",
                    key=f"{round_number}-{thread}-{number}",
                    data={"done": number},
                )

        threads = [threading.Thread(target=publish, args=(n,)) for n in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()


def test_a_verification_has_a_span_with_progress_events(
    store: WorkflowStore, runtime: StoreRuntime, telemetry: Collected
) -> None:
    started(store)
    queue(store, "follow-1")

    [outcome] = runtime.verify_projections(["follow_up_queue"])

    assert outcome.equal
    [verify] = telemetry.spans(VERIFY_SPAN)
    assert (verify.attributes or {})[PROJECTION] == ("follow_up_queue",)
    assert [event.name for event in verify.events]
    assert {event.name for event in verify.events} == {"progress"}
