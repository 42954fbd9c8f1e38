"""Rule 9 holds across processes: two restarts of one tree from the same terminal outcome,
made at the same instant by two processes, are never both accepted (upstream §3.8 rule 9,
issue 27). The two restarts change different runs (each its own source), so nothing but the
tree's restart index can make the second one see the first."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Final

import pytest

from runledger.domain.errors import RepeatedTerminalOutcomeError
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.scenario import SESSION, present_terminal, running_run
from tests.support.workers import Op, Outcome, run_race

TRIALS: Final = 100
REPEATED: Final = "The same terminal outcome already occurred in this restart chain"


THREAD_TRIALS: Final = 30


def two_restarts_of_one_tree(driver: WorkflowStore, number: int) -> list[tuple[str, str]]:
    """A tree whose two runs (run-b continues run-a) completed alike, one terminal
    fingerprint, each with its terminal message presented: ``(run id, message id)`` each."""
    root, child = f"tree-{number}-a", f"tree-{number}-b"
    running_run(driver, root)
    running_run(driver, child, parent_run_id=root)
    driver.finish_run(root, status="completed")
    driver.finish_run(child, status="completed")
    return [(run_id, present_terminal(driver, run_id)[0]) for run_id in (root, child)]


def restart_op(run_id: str, message_id: str) -> Op:
    return {
        "op": "call",
        "method": "restart_run",
        "args": [run_id],
        "kwargs": {"session_id": SESSION, "workflow_message_id": message_id},
    }


def verdict(first: Outcome, second: Outcome) -> str:
    """``one`` (exactly one restart accepted, the other refused by rule 9), ``both`` (the
    rule missed) or anything else the outcomes say."""
    accepted = [o for o in (first, second) if o.ok]
    refused = [o for o in (first, second) if not o.ok]
    if len(accepted) == 1 and [o.error_message for o in refused] == [REPEATED]:
        return "one"
    if len(accepted) == 2:
        return "both"
    return " / ".join(o.describe() for o in (first, second))


@pytest.mark.slow
def test_two_processes_restarting_one_outcome_in_one_tree_never_both_succeed(
    durable_url: str,
) -> None:
    rounds = []
    with open_store(durable_url) as driver:
        for number in range(TRIALS):
            restarts = two_restarts_of_one_tree(driver, number)
            rounds.append([[restart_op(*restart)] for restart in restarts])

    race = run_race(durable_url, rounds, time_budget=240, timeout=360)

    assert race.rounds_run == TRIALS
    verdicts = Counter(verdict(*race.round(number)) for number in range(TRIALS))
    print(f"restart race on {durable_url.split(':')[0]}: {dict(verdicts)}")
    assert verdicts == {"one": TRIALS}, dict(verdicts)


def test_two_stores_restarting_one_outcome_in_one_tree_at_once_never_both_succeed(
    store: WorkflowStore, second_store: WorkflowStore
) -> None:
    """The same race between two threads, each with its own store (and cache) on the same
    data: on memory too, which one process holds."""
    for number in range(THREAD_TRIALS):
        restarts = two_restarts_of_one_tree(store, number)
        start = threading.Barrier(2)
        outcomes: list[str] = []

        def restart(
            each: WorkflowStore,
            run_id: str,
            message_id: str,
            start: threading.Barrier = start,
            outcomes: list[str] = outcomes,
        ) -> None:
            start.wait(10)
            try:
                each.restart_run(run_id, session_id=SESSION, workflow_message_id=message_id)
            except RepeatedTerminalOutcomeError:
                outcomes.append("refused")
            else:
                outcomes.append("accepted")

        threads = [
            threading.Thread(target=restart, args=(each, *pair), daemon=True)
            for each, pair in zip((store, second_store), restarts, strict=True)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert sorted(outcomes) == ["accepted", "refused"], (number, outcomes)
