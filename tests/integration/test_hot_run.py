"""Commands on one hot run serialise instead of spinning out of retries (issue 8, gap 8).

Four processes queue 500 follow-ups each on the same run, and resend some request ids (their
own, certainly adopted, and a neighbour's, racing its first send). Every command must succeed,
every request id must be stored exactly once with one order number, and the orders must be
exactly 1..2000. The throughput and the conflicts per command are printed, not asserted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from runledger.domain.ids import follow_up_id_for
from runledger.domain.records import LoggedEvent
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.workers import Op, Outcome, run_race

pytestmark = pytest.mark.slow

SESSION = "session-hot"
WORKERS = 4
PER_WORKER = 500
RESEND_EVERY = 10


@pytest.fixture
def store(shared_url: str) -> Iterator[WorkflowStore]:
    with open_store(shared_url) as opened:
        yield opened


def queue_op(run_id: str, request_id: str) -> Op:
    return {
        "op": "queue",
        "run_id": run_id,
        "request_id": request_id,
        "target_session_id": SESSION,
        "actor": {"type": "session", "id": SESSION},
        "source": "hot-run-test",
        "prompt": f"Please also handle {request_id}",
    }


def worker_plan(run_id: str, worker: int) -> list[Op]:
    """500 fresh requests; every tenth is followed by a resend of an own and a neighbour's."""
    neighbour = (worker + 1) % WORKERS
    ops: list[Op] = []
    for index in range(PER_WORKER):
        ops.append(queue_op(run_id, f"w{worker}-{index}"))
        if index % RESEND_EVERY == RESEND_EVERY - 1:
            ops.append(queue_op(run_id, f"w{worker}-{index - 5}"))
            ops.append(queue_op(run_id, f"w{neighbour}-{index}"))
    return [*ops, {"op": "conflicts"}]


def accepted_events(store: WorkflowStore, run_id: str) -> list[LoggedEvent]:
    events: list[LoggedEvent] = []
    while page := store.event_log(after=events[-1].position if events else 0, run_id=run_id):
        events.extend(page)
    return [e for e in events if e.wire_name == "run.follow-up-accepted"]


def answers_by_request(outcomes: list[Outcome]) -> dict[str, list[tuple[str, int, bool]]]:
    answers: dict[str, list[tuple[str, int, bool]]] = {}
    for outcome in outcomes:
        if outcome.op["op"] == "queue" and outcome.result is not None:
            follow_up = outcome.result["follow_up"]
            answers.setdefault(outcome.op["request_id"], []).append(
                (follow_up["follow_up_id"], follow_up["order"], outcome.result["adopted"])
            )
    return answers


def test_four_processes_queueing_on_one_run_store_every_follow_up_once_in_order(
    store: WorkflowStore, shared_url: str
) -> None:
    run_id = "run-hot"
    store.create_run(run_id, workflow_name="hot", input={})
    store.bind_origin_session(run_id, SESSION)

    race = run_race(shared_url, [[worker_plan(run_id, w) for w in range(WORKERS)]], timeout=600.0)

    outcomes = race.round(0)
    errors = [o.describe() for o in outcomes if not o.ok]
    assert not errors, f"{len(errors)} commands failed:\n" + "\n".join(errors[:5])
    total = WORKERS * PER_WORKER
    answers = answers_by_request(outcomes)
    assert len(answers) == total
    problems = [
        f"{request_id}: {sends}"
        for request_id, sends in answers.items()
        if len({(f, order) for f, order, _ in sends}) != 1 or sum(not a for *_, a in sends) != 1
    ]
    assert not problems, "a request was stored twice or answered differently:\n" + "\n".join(
        problems[:5]
    )
    stored = {
        request_id: store.get_follow_up(follow_up_id_for(run_id, request_id))
        for request_id in answers
    }
    assert all(f is not None and f.order == answers[r][0][1] for r, f in stored.items())
    orders = sorted(f.order for f in stored.values() if f is not None)
    assert orders == list(range(1, total + 1)), (
        f"duplicates {[n for n, c in Counter(orders).items() if c > 1]}, "
        f"gaps {sorted(set(range(1, total + 1)) - set(orders))}"
    )
    accepted = accepted_events(store, run_id)
    assert [e.payload["order"] for e in accepted] == list(range(1, total + 1))

    commands = sum(o.op["op"] == "queue" for o in outcomes)
    conflicts = sum(
        o.result["conflicts"] for o in outcomes if o.op["op"] == "conflicts" and o.result
    )
    print(
        f"\n{shared_url.split(':', 1)[0]}: {WORKERS} processes x {PER_WORKER} follow-ups "
        f"({commands} commands with resends) in {race.elapsed:.1f} s: "
        f"{commands / race.elapsed:.0f} commands/s, {conflicts / commands:.2f} retries/command"
    )
