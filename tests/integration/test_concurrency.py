"""Foundation point 5: concurrent commands from several processes on one store lose nothing.

Each test spawns real processes (``multiprocessing`` "spawn"), each opening its own store on
a SQLite file or on PostgreSQL, released together by a barrier so that their commands race
on the same run. The processes report every outcome (record, or exception class and message);
the test then checks the outcomes against the store's aggregates and its event log.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest

from runledger.domain import Actor
from runledger.domain.follow_ups import follow_up_aggregate_id
from runledger.domain.ids import follow_up_id_for, follow_up_message_id
from runledger.domain.records import LoggedEvent
from runledger.domain.workflow_messages import message_aggregate_id
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.workers import Op, Outcome, RaceResult, Round, run_race

SESSION = "session-origin"
QUEUER = {"type": "session", "id": SESSION}
HUMAN = {"type": "human", "id": "alice"}
SOURCE = "concurrency-test"
FAILURE = "boom"
CANCELLED_REMOVAL = "A cancelled workflow follow-up cannot be removed"
PACES = (0.0, 0.002, 0.015)
"""Seconds each queuing process waits between two queue calls, by round (round n: n % 3)."""
RACE_BUDGET_SECONDS = 2.0
"""Rounds of a repeated race start only within this many seconds of the first one."""


@pytest.fixture
def store(durable_url: str) -> Iterator[WorkflowStore]:
    """The test's own store on the shared URL (it also creates the tables before the race)."""
    with open_store(durable_url) as opened:
        yield opened


# -- helpers ------------------------------------------------------------------------------


def start_run(store: WorkflowStore, run_id: str) -> str:
    store.create_run(run_id, workflow_name="concurrency", input={"case": run_id})
    store.bind_origin_session(run_id, SESSION)
    return run_id


def queue_op(run_id: str, request_id: str, prompt: str | None = None) -> Op:
    return {
        "op": "queue",
        "run_id": run_id,
        "request_id": request_id,
        "target_session_id": SESSION,
        "actor": QUEUER,
        "source": SOURCE,
        "prompt": prompt or f"Please also consider {request_id}",
    }


def finish_op(run_id: str, status: str, error: str | None = None) -> Op:
    return {"op": "finish", "run_id": run_id, "status": status, "error": error}


def remove_op(run_id: str, follow_up_id: str) -> Op:
    return {
        "op": "remove",
        "run_id": run_id,
        "follow_up_id": follow_up_id,
        "actor": HUMAN,
        "source": "operator-console",
    }


def sleep_op(seconds: float) -> Op:
    return {"op": "sleep", "seconds": seconds}


def wait_op(kind: str, at_least: int) -> Op:
    return {"op": "wait_for", "kind": kind, "at_least": at_least}


def paced(ops: list[Op], seconds: float) -> list[Op]:
    return [paced_op for op in ops for paced_op in (op, sleep_op(seconds))]


def run_log(store: WorkflowStore, run_id: str) -> list[LoggedEvent]:
    """Every event of the run (its follow-ups' and messages' too), paging through the log."""
    events: list[LoggedEvent] = []
    while True:
        page = store.event_log(after=events[-1].position if events else 0, run_id=run_id)
        if not page:
            return events
        events.extend(page)


def events_of(log: list[LoggedEvent], aggregate: object, wire_name: str) -> list[LoggedEvent]:
    return [e for e in log if e.aggregate_id == str(aggregate) and e.wire_name == wire_name]


def failures(outcomes: list[Outcome]) -> list[str]:
    return [o.describe() for o in outcomes if not o.ok]


def overlapping(outcomes: list[Outcome]) -> bool:
    """Whether every worker was still busy when the last one started: they really raced."""
    by_worker: dict[int, list[Outcome]] = {}
    for outcome in outcomes:
        by_worker.setdefault(outcome.worker, []).append(outcome)
    starts = [min(o.started for o in group) for group in by_worker.values()]
    ends = [max(o.ended for o in group) for group in by_worker.values()]
    return max(starts) < min(ends)


def not_accepting(run_id: str, status: str) -> str:
    return f"Workflow run {run_id} does not accept changes with status {status}"


# -- 1. concurrent queues on one run ------------------------------------------------------


@pytest.mark.parametrize(
    ("workers", "per_worker"),
    [
        pytest.param(2, 15, id="2-processes"),
        # 100 acceptances take the run (version 102) past its snapshot interval (100) mid-race.
        pytest.param(4, 25, id="4-processes"),
    ],
)
def test_concurrent_queues_get_every_order_number_once_without_gaps(
    store: WorkflowStore, durable_url: str, workers: int, per_worker: int
) -> None:
    run_id = start_run(store, "run-concurrent-queues")
    plan: Round = [
        [queue_op(run_id, f"w{worker}-req-{i}") for i in range(per_worker)]
        for worker in range(workers)
    ]

    race = run_race(durable_url, [plan])

    outcomes = race.round(0)
    total = workers * per_worker
    assert not failures(outcomes), "some queue calls failed:\n" + "\n".join(failures(outcomes))
    assert overlapping(outcomes), "the processes did not queue at the same time"
    adopted = [o.describe() for o in outcomes if o.result and o.result["adopted"]]
    assert not adopted, "distinct request ids were adopted:\n" + "\n".join(adopted)
    follow_ups = {
        o.op["request_id"]: store.get_follow_up(follow_up_id_for(run_id, o.op["request_id"]))
        for o in outcomes
    }
    missing = sorted(request_id for request_id, found in follow_ups.items() if found is None)
    assert not missing, f"acknowledged follow-ups are missing: {missing}"
    orders = sorted(f.order for f in follow_ups.values() if f is not None)
    assert orders == list(range(1, total + 1)), (
        f"orders are not exactly 1..{total}: duplicates "
        f"{[n for n, c in Counter(orders).items() if c > 1]}, "
        f"gaps {sorted(set(range(1, total + 1)) - set(orders))}"
    )
    returned = {
        o.result["follow_up"]["follow_up_id"]: o.result["follow_up"]["order"]
        for o in outcomes
        if o.result
    }
    stored = {f.follow_up_id: f.order for f in follow_ups.values() if f is not None}
    assert returned == stored, "the orders returned to the callers differ from the stored ones"
    accepted = [e for e in run_log(store, run_id) if e.wire_name == "run.follow-up-accepted"]
    logged = {e.payload["follow_up_id"]: e.payload["order"] for e in accepted}
    assert len(accepted) == total, f"{len(accepted)} run.follow-up-accepted events for {total}"
    assert logged == stored, "run.follow-up-accepted events disagree with the follow-ups"
    assert [e.payload["order"] for e in accepted] == list(range(1, total + 1)), (
        "run.follow-up-accepted events are not in order-number order in the log"
    )


# -- 2. the same request from several processes -------------------------------------------


def test_the_same_request_queued_concurrently_is_queued_once_and_adopted_by_the_others(
    store: WorkflowStore, durable_url: str
) -> None:
    run_id = start_run(store, "run-same-request")
    workers, rounds = 4, 6
    plan: list[Round] = [
        [
            [queue_op(run_id, f"same-req-{number}", prompt="Identical prompt")]
            for _ in range(workers)
        ]
        for number in range(rounds)
    ]

    race = run_race(durable_url, plan, time_budget=RACE_BUDGET_SECONDS)

    log = run_log(store, run_id)
    problems: list[str] = []
    for number in range(race.rounds_run):
        outcomes = race.round(number)
        request_id = f"same-req-{number}"
        follow_up_id = follow_up_id_for(run_id, request_id)
        aggregate = follow_up_aggregate_id(follow_up_id)
        problems += failures(outcomes)
        fresh = [o for o in outcomes if o.ok and o.result and not o.result["adopted"]]
        if len(fresh) != 1:
            problems.append(f"{request_id}: {len(fresh)} callers got adopted=False, expected 1")
        answers = {
            (o.result["follow_up"]["follow_up_id"], o.result["follow_up"]["order"])
            for o in outcomes
            if o.ok and o.result
        }
        if len(answers) != 1:
            problems.append(f"{request_id}: callers were given different follow-ups {answers}")
        queued = events_of(log, aggregate, "follow-up.queued")
        accepted = [
            e
            for e in log
            if e.wire_name == "run.follow-up-accepted" and e.payload["follow_up_id"] == follow_up_id
        ]
        created = events_of(
            log,
            message_aggregate_id(follow_up_message_id(follow_up_id)),
            "workflow-message.created",
        )
        if (len(queued), len(accepted), len(created)) != (1, 1, 1):
            problems.append(
                f"{request_id}: {len(queued)} follow-up.queued, {len(accepted)} "
                f"run.follow-up-accepted and {len(created)} workflow-message.created events, "
                "expected one of each"
            )
    assert not problems, "\n".join(problems)
    assert any(overlapping(race.round(n)) for n in range(race.rounds_run)), (
        "in no round did the processes send the request at the same time"
    )


# -- 3 and 4. a run ends while processes queue --------------------------------------------


def end_while_queueing_plan(
    store: WorkflowStore, prefix: str, status: str, error: str | None
) -> tuple[list[Round], list[str]]:
    """Two queuing processes and one that ends the run part-way through, on a new run per round.

    The finisher waits until a round-dependent number of queue calls has completed, so the
    end lands at a different point of the burst each round (round 0: straight away). Ending a
    run reloads all its follow-ups, so a back-to-back burst of queues would win every retry
    until it is over; so most rounds pace the queues a little (see ``PACES``). Each queuer
    sends its last request only once the run has ended, so every round sees a rejection.
    """
    queuers, per_queuer, rounds = 2, 8, 8
    plan: list[Round] = []
    run_ids: list[str] = []
    for number in range(rounds):
        run_id = start_run(store, f"{prefix}-{number}")
        run_ids.append(run_id)
        racing = queuers * (per_queuer - 1)
        queues: list[list[Op]] = [
            [
                *paced(
                    [queue_op(run_id, f"r{number}-w{w}-req-{i}") for i in range(per_queuer - 1)],
                    PACES[number % len(PACES)],
                ),
                wait_op("finish", 1),
                queue_op(run_id, f"r{number}-w{w}-req-last"),
            ]
            for w in range(queuers)
        ]
        ender = [wait_op("queue", (number * 3) % racing), finish_op(run_id, status, error)]
        plan.append([*queues, ender])
    return plan, run_ids


def classify_queue_attempts(
    store: WorkflowStore, race: RaceResult, run_ids: list[str], status: str
) -> tuple[list[str], Counter[str]]:
    """Each queue attempt must be accepted before the end or rejected, never both or neither."""
    problems: list[str] = []
    tally: Counter[str] = Counter()
    for number in range(race.rounds_run):
        run_id = run_ids[number]
        outcomes = race.round(number)
        finishes = [o for o in outcomes if o.op["op"] == "finish"]
        problems += failures(finishes)
        log = run_log(store, run_id)
        finished = [e.position for e in log if e.wire_name == "run.finished"]
        if len(finished) != 1:
            problems.append(f"{run_id}: {len(finished)} run.finished events, expected 1")
            continue
        for outcome in (o for o in outcomes if o.op["op"] == "queue"):
            follow_up_id = follow_up_id_for(run_id, outcome.op["request_id"])
            stored = store.get_follow_up(follow_up_id)
            accepted = [
                e
                for e in log
                if e.wire_name == "run.follow-up-accepted"
                and e.payload["follow_up_id"] == follow_up_id
            ]
            if outcome.ok:
                tally["accepted"] += 1
                if outcome.result is None or outcome.result["adopted"]:
                    problems.append(f"accepted but adopted: {outcome.describe()}")
                if stored is None or len(accepted) != 1:
                    problems.append(f"accepted but not stored: {outcome.describe()}")
                elif accepted[0].position > finished[0]:
                    problems.append(f"accepted after the end: {outcome.describe()}")
                else:
                    problems += check_accepted(store, log, run_id, stored, status)
            else:
                tally["rejected"] += 1
                expected = ("RunNotAcceptingChangesError", not_accepting(run_id, status))
                if (outcome.error_type, outcome.error_message) != expected:
                    problems.append(f"unexpected failure: {outcome.describe()}")
                if stored is not None or accepted:
                    problems.append(f"rejected but stored: {outcome.describe()} -> {stored}")
    return problems, tally


def check_accepted(
    store: WorkflowStore, log: list[LoggedEvent], run_id: str, stored: Any, status: str
) -> list[str]:
    """A follow-up accepted before the end is cancelled by a failure, kept by a completion."""
    aggregate = follow_up_aggregate_id(stored.follow_up_id)
    cancelled = events_of(log, aggregate, "follow-up.cancelled")
    message = store.get_workflow_message(follow_up_message_id(stored.follow_up_id))
    delivery = None if message is None else message.status
    if status == "failed":
        good = (
            stored.state == "cancelled"
            and stored.reason == FAILURE
            and len(cancelled) == 1
            and cancelled[0].payload["reason"] == FAILURE
            and cancelled[0].payload["ended_run_id"] == run_id
            and delivery == "cancelled"
        )
    else:
        good = stored.state == "queued" and not cancelled and delivery == "pending"
    if good:
        return []
    return [
        f"{stored.follow_up_id} of {run_id} after a {status} end: state {stored.state}, "
        f"reason {stored.reason!r}, {len(cancelled)} follow-up.cancelled events, "
        f"message {delivery}"
    ]


@pytest.mark.parametrize(
    ("status", "error", "prefix"),
    [
        pytest.param("failed", FAILURE, "run-fails", id="failed"),
        pytest.param("completed", None, "run-completes", id="completed"),
    ],
)
def test_a_run_ending_while_processes_queue_accepts_or_rejects_each_follow_up_exactly_once(
    store: WorkflowStore, durable_url: str, status: str, error: str | None, prefix: str
) -> None:
    plan, run_ids = end_while_queueing_plan(store, prefix, status, error)

    race = run_race(durable_url, plan, time_budget=RACE_BUDGET_SECONDS)

    problems, tally = classify_queue_attempts(store, race, run_ids, status)
    assert not problems, f"after {race.rounds_run} rounds:\n" + "\n".join(problems)
    assert set(tally) == {"accepted", "rejected"}, (
        f"the race never split the attempts ({dict(tally)} in {race.rounds_run} rounds)"
    )


# -- 5. a human removes follow-ups while the run fails ------------------------------------


def test_removal_racing_a_failure_leaves_each_follow_up_removed_or_cancelled_once(
    store: WorkflowStore, durable_url: str
) -> None:
    """Per round: a human removes a run's follow-ups while the run fails part-way through.

    The last removal is sent only once the run has failed, so each round has a cancelled one.
    """
    per_round, rounds = 6, 8
    plan: list[Round] = []
    follow_up_ids: list[list[str]] = []
    for number in range(rounds):
        run_id = start_run(store, f"run-removal-{number}")
        ids = [
            store.queue_follow_up(
                run_id,
                request_id=f"req-{i}",
                target_session_id=SESSION,
                actor=Actor.from_json(QUEUER),
                source=SOURCE,
                prompt=f"Prompt {i}",
            ).follow_up.follow_up_id
            for i in range(per_round)
        ]
        follow_up_ids.append(ids)
        plan.append(
            [
                [
                    *paced(
                        [remove_op(run_id, follow_up_id) for follow_up_id in ids[:-1]],
                        PACES[number % len(PACES)],
                    ),
                    wait_op("finish", 1),
                    remove_op(run_id, ids[-1]),
                ],
                [wait_op("remove", number % per_round), finish_op(run_id, "failed", FAILURE)],
            ]
        )

    race = run_race(durable_url, plan, time_budget=RACE_BUDGET_SECONDS)

    problems: list[str] = []
    tally: Counter[str] = Counter()
    for number in range(race.rounds_run):
        run_id = f"run-removal-{number}"
        outcomes = race.round(number)
        problems += failures([o for o in outcomes if o.op["op"] == "finish"])
        log = run_log(store, run_id)
        removals = {o.op["follow_up_id"]: o for o in outcomes if o.op["op"] == "remove"}
        for follow_up_id in follow_up_ids[number]:
            stored = store.get_follow_up(follow_up_id)
            message_id = follow_up_message_id(follow_up_id)
            message = store.get_workflow_message(message_id)
            aggregate = follow_up_aggregate_id(follow_up_id)
            terminal = [
                e.wire_name
                for e in log
                if e.aggregate_id == str(aggregate)
                and e.wire_name in ("follow-up.removed", "follow-up.cancelled")
            ]
            message_cancels = events_of(
                log, message_aggregate_id(message_id), "workflow-message.cancelled"
            )
            removal = removals[follow_up_id]
            state = None if stored is None else stored.state
            tally[str(state)] += 1
            expected_removal = (
                (True, None, None)
                if state == "removed"
                else (False, "CancelledFollowUpRemovalError", CANCELLED_REMOVAL)
            )
            if (
                state not in ("removed", "cancelled")
                or terminal != [f"follow-up.{state}"]
                or message is None
                or message.status != "cancelled"
                or len(message_cancels) != 1
                or (removal.ok, removal.error_type, removal.error_message) != expected_removal
            ):
                problems.append(
                    f"{follow_up_id} of {run_id}: state {state}, terminal events {terminal}, "
                    f"message {None if message is None else message.status} with "
                    f"{len(message_cancels)} cancellations; removal: {removal.describe()}"
                )
    assert not problems, f"after {race.rounds_run} rounds:\n" + "\n".join(problems)
    assert {"removed", "cancelled"} <= set(tally), (
        f"the race never split the outcomes ({dict(tally)} in {race.rounds_run} rounds)"
    )


# -- 6. a continuation child fails while its waiting parent queues ------------------------


def test_a_continuation_child_failing_cancels_every_parent_follow_up_accepted_before_its_end(
    store: WorkflowStore, durable_url: str
) -> None:
    """DESIGN decision 1: a failed end cancels its continuation ancestors' follow-ups too.

    The parent waits at a checkpoint (so it still accepts follow-ups) while its continuation
    child runs; two processes queue on the parent while a third fails the child. Whatever the
    interleaving, a parent follow-up accepted before the child's ``run.finished`` (log order)
    must be cancelled, and one accepted after it must stay queued.
    """
    queuers, per_queuer, rounds = 2, 8, 8
    plan: list[Round] = []
    lineages: list[tuple[str, str]] = []
    for number in range(rounds):
        parent = start_run(store, f"parent-{number}")
        store.record_progress(parent, status="waiting", waiting_on="checkpoint")
        child = store.create_run(
            f"child-{number}", workflow_name="concurrency", input={}, parent_run_id=parent
        ).run_id
        lineages.append((parent, child))
        queues = [
            paced(
                [queue_op(parent, f"r{number}-w{w}-req-{i}") for i in range(per_queuer)],
                PACES[number % len(PACES)],
            )
            for w in range(queuers)
        ]
        ender = [
            wait_op("queue", (number * 3) % (queuers * per_queuer - 2)),
            finish_op(child, "failed", FAILURE),
        ]
        plan.append([*queues, ender])

    race = run_race(durable_url, plan, time_budget=RACE_BUDGET_SECONDS)

    problems: list[str] = []
    for number in range(race.rounds_run):
        parent, child = lineages[number]
        problems += failures(race.round(number))
        ended = [e.position for e in run_log(store, child) if e.wire_name == "run.finished"]
        if len(ended) != 1:
            problems.append(f"{child}: {len(ended)} run.finished events, expected 1")
            continue
        accepted_at = {
            e.payload["follow_up_id"]: e.position
            for e in run_log(store, parent)
            if e.wire_name == "run.follow-up-accepted"
        }
        for follow_up_id, position in sorted(accepted_at.items(), key=lambda item: item[1]):
            stored = store.get_follow_up(follow_up_id)
            state = None if stored is None else stored.state
            expected = "cancelled" if position < ended[0] else "queued"
            if state != expected:
                problems.append(
                    f"{follow_up_id} of {parent}: accepted at log position {position}, "
                    f"{child} failed at {ended[0]}, yet the follow-up is {state} "
                    f"(expected {expected})"
                )
    assert not problems, f"after {race.rounds_run} rounds:\n" + "\n".join(problems)


# -- 7. a hot run: four processes x 500 follow-ups ----------------------------------------

HOT_WORKERS = 4
HOT_PER_WORKER = 500
RESEND_EVERY = 10


def hot_plan(run_id: str, worker: int) -> list[Op]:
    """500 fresh requests; every tenth is followed by a resend of an own earlier one (surely
    adopted) and of a neighbour's (racing its first send), then the process's conflicts."""
    neighbour = (worker + 1) % HOT_WORKERS
    ops: list[Op] = []
    for index in range(HOT_PER_WORKER):
        ops.append(queue_op(run_id, f"w{worker}-{index}", prompt=f"Prompt w{worker}-{index}"))
        if index % RESEND_EVERY == RESEND_EVERY - 1:
            ops.append(queue_op(run_id, f"w{worker}-{index - 5}", f"Prompt w{worker}-{index - 5}"))
            ops.append(queue_op(run_id, f"w{neighbour}-{index}", f"Prompt w{neighbour}-{index}"))
    return [*ops, {"op": "conflicts"}]


def answers_by_request(outcomes: list[Outcome]) -> dict[str, list[tuple[str, int, bool]]]:
    """Per request id, every caller's (follow-up id, order, adopted)."""
    answers: dict[str, list[tuple[str, int, bool]]] = {}
    for outcome in outcomes:
        if outcome.op["op"] == "queue" and outcome.result is not None:
            follow_up = outcome.result["follow_up"]
            answers.setdefault(outcome.op["request_id"], []).append(
                (follow_up["follow_up_id"], follow_up["order"], outcome.result["adopted"])
            )
    return answers


@pytest.mark.slow
def test_four_processes_queueing_500_each_on_one_run_store_2000_in_order_without_errors(
    store: WorkflowStore, durable_url: str
) -> None:
    """Issue 8: a hot run's commands take turns instead of spinning out of retries.

    Throughput and conflicts per command are printed (``-s``), not asserted.
    """
    run_id = start_run(store, "run-hot")

    race = run_race(durable_url, [[hot_plan(run_id, w) for w in range(HOT_WORKERS)]], timeout=600)

    outcomes = race.round(0)
    assert not failures(outcomes), "\n".join(failures(outcomes)[:5])
    total = HOT_WORKERS * HOT_PER_WORKER
    answers = answers_by_request(outcomes)
    assert len(answers) == total
    inexact = [
        f"{request_id}: {sends}"
        for request_id, sends in answers.items()
        if len({(f, order) for f, order, _ in sends}) != 1
        or [a for *_, a in sends].count(False) != 1
    ]
    assert not inexact, "a request was not stored exactly once:\n" + "\n".join(inexact[:5])
    stored = [store.get_follow_up(follow_up_id_for(run_id, request_id)) for request_id in answers]
    assert all(f is not None and f.order == answers[f.request_id][0][1] for f in stored)
    orders = sorted(f.order for f in stored if f is not None)
    assert orders == list(range(1, total + 1))
    accepted = [e for e in run_log(store, run_id) if e.wire_name == "run.follow-up-accepted"]
    assert [e.payload["order"] for e in accepted] == list(range(1, total + 1))

    commands = sum(o.op["op"] == "queue" for o in outcomes)
    conflicts = sum(
        o.result["conflicts"] for o in outcomes if o.op["op"] == "conflicts" and o.result
    )
    print(
        f"\n{durable_url.split(':', 1)[0]}: {HOT_WORKERS} processes x {HOT_PER_WORKER} follow-ups "
        f"({commands} commands with resends) in {race.elapsed:.1f} s: "
        f"{commands / race.elapsed:.0f} commands/s, {conflicts / commands:.2f} retries/command"
    )


# -- J3: settings changes from two processes without expected numbers ----------------------


@pytest.mark.parametrize(
    "per_worker", [pytest.param(1, id="j3-one-each"), pytest.param(10, id="ten-each")]
)
def test_j3_two_processes_changing_settings_all_land_with_consecutive_change_numbers(
    store: WorkflowStore, durable_url: str, per_worker: int
) -> None:
    run_id = start_run(store, "run-settings")
    store.record_progress(run_id, status="running", current_node="hold")
    scope = store.ensure_settings_scope(
        run_id,
        settings={"notes": []},
        policy={"rules": [{"path": "/notes", "permissions": {"human": ["add"]}}]},
    )
    notes = [[f"{worker}-{n}" for n in range(per_worker)] for worker in ("one", "two")]
    plan: Round = [
        [
            {
                "op": "change_settings",
                "run_id": run_id,
                "scope_id": scope.scope_id,
                "request_id": f"note-{note}",
                "actor": HUMAN,
                "source": SOURCE,
                "patch": [{"op": "add", "path": "/notes/-", "value": note}],
            }
            for note in worker_notes
        ]
        for worker_notes in notes
    ]

    race = run_race(durable_url, [plan])

    outcomes = race.round(0)
    assert not failures(outcomes), "a settings change failed:\n" + "\n".join(failures(outcomes))
    total = 2 * per_worker
    numbers = sorted(o.result["change"]["change_number"] for o in outcomes if o.result)
    assert numbers == list(range(1, total + 1))
    [final] = store.settings_scopes(run_id)
    assert final.change_number == total
    assert sorted(final.settings["notes"]) == sorted(notes[0] + notes[1])
    changed = [e for e in run_log(store, run_id) if e.wire_name == "settings.changed"]
    assert [e.payload["change_number"] for e in changed] == list(range(1, total + 1))
