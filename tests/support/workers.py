"""Race commands from several real processes against one store (``spawn``, one store each).

A race is a list of rounds; a round gives each worker process a list of operations. Every
process opens its own store from the URL before the first round, then, round after round,
waits on a shared barrier with the driving test so that all of them start the round's
operations at the same instant. Each operation's outcome (the record it returned, or the
exception's class name and message) goes back to the test through a queue.

Operations are plain dicts so that they pickle across the spawn boundary:

- ``{"op": "queue", "run_id", "request_id", "target_session_id", "actor", "source", "prompt"}``
- ``{"op": "remove", "run_id", "follow_up_id", "actor", "source"}``
- ``{"op": "finish", "run_id", "status", "error"}``
- ``{"op": "answer", "decision_id", "actor", "response", "submission_id"}``
- ``{"op": "conflicts"}``: how many version conflicts made this process's commands run again
  so far (its result is ``{"conflicts": n}``).
- ``{"op": "change_settings", "run_id", "scope_id", "request_id", "actor", "source", "patch"}``
- ``{"op": "call", "method", "args", "kwargs"}``: any public store method by name (a
  ``RunClaim`` given as ``{"claim": {...}}`` is rebuilt); its result is the record's JSON
  (under ``"value"`` when the method returns a plain value or None).
- ``{"op": "sleep", "seconds"}``: pace a burst, so that a slower command (ending a run walks
  all its follow-ups) gets a chance between two fast ones instead of losing every retry.
- ``{"op": "wait_for", "kind", "at_least"}``: wait (bounded) until the round's completed
  operations of ``kind`` (``queue``, ``remove`` or ``finish``), counted over all processes,
  reach ``at_least``. A finisher uses it to strike part-way through a burst; a queuer, to make
  sure that one of its calls comes after the end.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import queue
import threading
import time
import traceback
from collections.abc import Sequence
from dataclasses import dataclass, field
from multiprocessing.context import SpawnContext, SpawnProcess
from multiprocessing.sharedctypes import SynchronizedArray
from multiprocessing.synchronize import Barrier, Event
from typing import TYPE_CHECKING, Any, cast

if TYPE_CHECKING:
    from pydantic import BaseModel

    from runledger.infrastructure.store import WorkflowStore

Op = dict[str, Any]
Round = list[list[Op]]
"""One round: the operations of each worker, indexed by worker number."""

BARRIER_TIMEOUT_SECONDS = 60.0
WAIT_FOR_SECONDS = 5.0
COUNTED_KINDS: tuple[str, ...] = ("queue", "remove", "finish")


@dataclass(frozen=True)
class Outcome:
    """What one operation did in one worker process."""

    worker: int
    round: int
    index: int
    op: Op
    started: float
    ended: float
    result: dict[str, Any] | None = None
    error_type: str | None = None
    error_message: str | None = None
    error_traceback: str | None = None

    @property
    def ok(self) -> bool:
        return self.error_type is None

    def describe(self) -> str:
        key = self.op.get("request_id") or self.op.get("follow_up_id") or self.op.get("run_id")
        head = f"worker {self.worker} round {self.round} op {self.index} {self.op['op']}({key})"
        if self.ok:
            return f"{head} -> ok {self.result}"
        text = f"{head} -> {self.error_type}: {self.error_message}"
        if self.error_traceback:
            text += "\n" + self.error_traceback
        return text


@dataclass
class RaceResult:
    """Every outcome of a race, by round, plus the rounds it actually ran."""

    rounds_run: int
    outcomes: list[list[Outcome]] = field(default_factory=list)
    elapsed: float = 0.0

    def round(self, number: int) -> list[Outcome]:
        return self.outcomes[number]

    def all(self) -> list[Outcome]:
        return [outcome for outcomes in self.outcomes for outcome in outcomes]


class RaceFailedError(RuntimeError):
    """A worker process crashed or never reported; carries what each worker said."""


# -- the worker process -------------------------------------------------------------------


def _perform(store: WorkflowStore, op: Op) -> dict[str, Any]:
    from runledger.domain import Actor

    kind = op["op"]
    record: BaseModel
    if kind == "queue":
        record = store.queue_follow_up(
            op["run_id"],
            request_id=op["request_id"],
            target_session_id=op["target_session_id"],
            actor=Actor(**op["actor"]),
            source=op["source"],
            prompt=op["prompt"],
        )
    elif kind == "remove":
        record = store.remove_follow_up(
            op["run_id"], op["follow_up_id"], actor=Actor(**op["actor"]), source=op["source"]
        )
    elif kind == "finish":
        record = store.finish_run(op["run_id"], status=op["status"], error=op.get("error"))
    elif kind == "answer":
        record = store.answer_human_decision(
            op["decision_id"],
            actor=Actor(**op["actor"]),
            response=op["response"],
            submission_id=op["submission_id"],
        )
    elif kind == "conflicts":
        return {"conflicts": store._runtime.stats.conflicts}
    elif kind == "call":
        return _call(store, op["method"], op.get("args", []), op.get("kwargs", {}))
    elif kind == "change_settings":
        record = store.change_settings(
            op["run_id"],
            op["scope_id"],
            request_id=op["request_id"],
            actor=Actor(**op["actor"]),
            source=op["source"],
            patch=op["patch"],
        )
    else:
        msg = f"Unknown race operation {kind!r}"
        raise ValueError(msg)
    return record.model_dump(mode="json")


def _call(
    store: WorkflowStore, method: str, args: list[Any], kwargs: dict[str, Any]
) -> dict[str, Any]:
    from pydantic import BaseModel

    from runledger.domain.records import RunClaim

    def revived(value: Any) -> Any:
        if isinstance(value, dict) and set(value) == {"claim"}:
            return RunClaim(**value["claim"])
        return value

    if method.startswith("_"):
        msg = f"Not a public store method: {method!r}"
        raise ValueError(msg)
    result = getattr(store, method)(
        *[revived(a) for a in args], **{k: revived(v) for k, v in kwargs.items()}
    )
    if isinstance(result, BaseModel):
        return result.model_dump(mode="json")
    return {"value": result}


def _wait_for(counts: SynchronizedArray[int], kind: str, at_least: int) -> dict[str, Any]:
    slot = COUNTED_KINDS.index(kind)
    deadline = time.monotonic() + WAIT_FOR_SECONDS
    while counts[slot] < at_least and time.monotonic() < deadline:
        time.sleep(0.0005)
    return {"kind": kind, "completed": counts[slot]}


def worker_main(
    worker: int,
    url: str,
    plan: list[list[Op]],
    barrier: Barrier,
    stop: Event,
    progress: Sequence[SynchronizedArray[int]],
    clean_exits: SynchronizedArray[int],
    results: multiprocessing.Queue[dict[str, Any]],
) -> None:
    """Open the store, then run this worker's operations of each round right after the barrier."""
    try:
        from runledger.infrastructure.store import open_store

        with open_store(url) as store:
            for number, ops in enumerate(plan):
                barrier.wait(BARRIER_TIMEOUT_SECONDS)
                if stop.is_set():
                    break
                outcomes = []
                for index, op in enumerate(ops):
                    started = time.monotonic()
                    try:
                        if op["op"] == "wait_for":
                            result = _wait_for(progress[number], op["kind"], op["at_least"])
                        elif op["op"] == "sleep":
                            time.sleep(op["seconds"])
                            continue
                        else:
                            result = _perform(store, op)
                    # Every failure is an outcome the test must judge, so none is swallowed.
                    except Exception as error:
                        outcome = Outcome(
                            worker,
                            number,
                            index,
                            op,
                            started,
                            time.monotonic(),
                            error_type=type(error).__name__,
                            error_message=str(error),
                            error_traceback=traceback.format_exc(),
                        )
                    else:
                        outcome = Outcome(
                            worker, number, index, op, started, time.monotonic(), result
                        )
                    if op["op"] in COUNTED_KINDS:
                        with progress[number].get_lock():
                            progress[number][COUNTED_KINDS.index(op["op"])] += 1
                    outcomes.append(outcome)
                results.put({"worker": worker, "round": number, "outcomes": outcomes})
        clean_exits[worker] = 1
    except BaseException:
        barrier.abort()
        results.put({"worker": worker, "fatal": traceback.format_exc()})
        raise


# -- the driving side ---------------------------------------------------------------------


def run_race(
    url: str,
    rounds: list[Round],
    *,
    time_budget: float = 10.0,
    timeout: float = 90.0,
) -> RaceResult:
    """Race ``rounds`` over one spawned process per worker; stop early once over budget.

    Every round after the first starts only while the race is within ``time_budget``
    seconds; ``timeout`` bounds the whole race, start-up included.
    """
    workers = len(rounds[0])
    if any(len(plan) != workers for plan in rounds):
        msg = "Every round must give operations to the same number of workers"
        raise ValueError(msg)
    context: SpawnContext = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers + 1)
    stop = context.Event()
    progress = [context.Array("i", len(COUNTED_KINDS)) for _ in rounds]
    clean_exits = context.Array("b", workers)
    results: multiprocessing.Queue[dict[str, Any]] = context.Queue()
    processes: list[SpawnProcess] = [
        context.Process(
            target=worker_main,
            args=(
                worker,
                url,
                [plan[worker] for plan in rounds],
                barrier,
                stop,
                progress,
                clean_exits,
                results,
            ),
            name=f"race-worker-{worker}",
            daemon=True,
        )
        for worker in range(workers)
    ]
    deadline = time.monotonic() + timeout
    reports: list[dict[str, Any]] = []
    race = RaceResult(rounds_run=0)
    for process in processes:
        process.start()
    finished = threading.Event()
    watcher = threading.Thread(
        target=_watch, args=(processes, clean_exits, barrier, finished), daemon=True
    )
    watcher.start()
    try:
        started: float | None = None
        for number in range(len(rounds)):
            if started is not None and time.monotonic() - started > time_budget:
                stop.set()
                _wait_barrier(barrier, processes, deadline, reports, results)
                break
            _wait_barrier(barrier, processes, deadline, reports, results)
            if started is None:
                started = time.monotonic()
            round_reports = _collect(results, processes, deadline, reports)
            outcomes = [o for report in round_reports for o in report["outcomes"]]
            outcomes.sort(key=lambda o: (o.worker, o.index))
            race.outcomes.append(outcomes)
            race.rounds_run = number + 1
        race.elapsed = 0.0 if started is None else time.monotonic() - started
        for process in processes:
            process.join(max(0.1, deadline - time.monotonic()))
        failed = [p for p in processes if p.exitcode != 0]
        if failed:
            raise RaceFailedError(_explain("worker exited badly", processes, reports, results))
        return race
    finally:
        finished.set()
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join(5)


def _wait_barrier(
    barrier: Barrier,
    processes: list[SpawnProcess],
    deadline: float,
    reports: list[dict[str, Any]],
    results: multiprocessing.Queue[dict[str, Any]],
) -> None:
    try:
        barrier.wait(max(0.1, deadline - time.monotonic()))
    except threading.BrokenBarrierError as error:
        raise RaceFailedError(_explain("barrier broken", processes, reports, results)) from error


def _collect(
    results: multiprocessing.Queue[dict[str, Any]],
    processes: list[SpawnProcess],
    deadline: float,
    reports: list[dict[str, Any]],
) -> list[dict[str, Any]]:
    round_reports: list[dict[str, Any]] = []
    while len(round_reports) < len(processes):
        try:
            report = results.get(timeout=0.2)
        except queue.Empty:
            if any(p.exitcode not in (None, 0) for p in processes):
                raise RaceFailedError(
                    _explain("a worker died without reporting", processes, reports, results)
                ) from None
            if time.monotonic() > deadline:
                raise RaceFailedError(
                    _explain("a worker never reported", processes, reports, results)
                ) from None
            continue
        reports.append(report)
        if "fatal" in report:
            raise RaceFailedError(_explain("worker crashed", processes, reports, results))
        round_reports.append(report)
    return round_reports


def _watch(
    processes: list[SpawnProcess],
    clean_exits: SynchronizedArray[int],
    barrier: Barrier,
    finished: threading.Event,
) -> None:
    """Break the barrier as soon as a worker dies, so that nobody waits for it in vain.

    It judges by the sentinel and the worker's own clean-exit flag, never by ``exitcode``:
    polling that would reap the child under the main thread's ``join``.
    """
    running = {p.sentinel: worker for worker, p in enumerate(processes)}
    while running and not finished.is_set():
        for sentinel in multiprocessing.connection.wait(list(running), timeout=0.2):
            if not clean_exits[running.pop(cast(int, sentinel))]:
                barrier.abort()
                return


def _explain(
    what: str,
    processes: list[SpawnProcess],
    reports: list[dict[str, Any]],
    results: multiprocessing.Queue[dict[str, Any]],
) -> str:
    while True:
        try:
            reports.append(results.get(timeout=0.5))
        except queue.Empty:
            break
    lines = [f"Race failed: {what}"]
    lines += [f"{p.name}: exit code {p.exitcode}" for p in processes]
    lines += [f"worker {r['worker']} crashed:\n{r['fatal']}" for r in reports if "fatal" in r]
    return "\n".join(lines)
