"""Random sequences of create / continue / finish / restart / queue / remove against a small
reference model of upstream §3.8 (lineage, restarts) and §4 (follow-ups), with the DESIGN
decisions that override it (1: a bad end cancels along continuation links only; 8: finishing
twice is refused; 9: an existing restart child is adopted before the same-outcome rule; 13: a
queued run takes no follow-ups).

Every command's answer (its record, or its error's exact text) is checked against the model,
and after every step each run and follow-up the model knows is read back, from the aggregates
and from the follow-up read model. Each example works in its own session with its own run ids,
so one store serves every example of a test.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Final

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from runledger.domain.errors import WorkflowError
from runledger.domain.ids import follow_up_id_for
from runledger.domain.values import Actor
from runledger.infrastructure import open_store
from runledger.infrastructure.store import WorkflowStore
from tests.support.clock import FakeClock

INPUT: Final = {"task": "reply"}
BAD_ENDS: Final = ("failed", "timed_out", "cancelled")
ENDS: Final = ("completed", *BAD_ENDS)
REQUESTS: Final = ("r1", "r2", "r3")
RESTART_LIMIT: Final = 3
SOURCE: Final = "workflow-tool"


@dataclass
class ModelRun:
    """What §3.8 says of a run: its lineage, status and terminal outcome."""

    run_id: str
    parent: str | None
    root: str
    kind: str | None
    restart_number: int
    parent_outcome: tuple[Any, ...] | None
    status: str
    outcome: tuple[Any, ...] | None = None
    """The terminal facts the fingerprint covers (status, output, error): equal facts, equal
    fingerprints (§5.7)."""
    restart_child: str | None = None
    presented: str | None = None
    """The terminal message, once delivered and given a model turn."""
    follow_ups: dict[str, str] = field(default_factory=dict)
    """Request id -> state (queued, removed, cancelled), in queue order."""

    @property
    def ended(self) -> bool:
        return self.status in ENDS


class Model:
    """Upstream's rules, written plainly over the runs they concern."""

    def __init__(self) -> None:
        self.runs: dict[str, ModelRun] = {}

    def continuation_chain(self, run: ModelRun) -> Iterator[ModelRun]:
        yield run
        while run.kind == "continuation" and run.parent is not None:
            run = self.runs[run.parent]
            yield run

    def finish(self, run: ModelRun, status: str, outcome: tuple[Any, ...]) -> None:
        run.status, run.outcome = status, outcome
        if status in BAD_ENDS:
            for each in self.continuation_chain(run):
                for request, state in each.follow_ups.items():
                    if state == "queued":
                        each.follow_ups[request] = "cancelled"

    def restart_answer(self, run: ModelRun) -> str:
        """``new``, ``adopted`` or the error text, in §3.8's order with decision 9."""
        if run.status == "cancelled":
            return "An explicitly cancelled workflow cannot be restarted"
        if run.restart_number >= RESTART_LIMIT:
            return "Workflow restart limit reached (3 restarts)"
        if not run.ended:
            return "Workflow terminal result is stale or was replaced"
        if run.restart_child is not None:
            return "adopted"
        if any(
            other.root == run.root and other.parent_outcome == run.outcome
            for other in self.runs.values()
        ):
            return "The same terminal outcome already occurred in this restart chain"
        return "new"


_examples = itertools.count(1)


class LineageMachine(RuleBasedStateMachine):
    """One example: a session of its own, its runs, and the model beside them."""

    store: WorkflowStore

    runs = Bundle("runs")

    def __init__(self) -> None:
        super().__init__()
        self.example = next(_examples)
        self.session = f"session-{self.example}"
        self.model = Model()
        self.numbers = itertools.count(1)
        self.turns = itertools.count(1)

    def new_id(self) -> str:
        return f"x{self.example}-run-{next(self.numbers)}"

    def answer(self, command: Any, *args: Any, **kwargs: Any) -> tuple[Any, str | None]:
        try:
            return command(*args, **kwargs), None
        except WorkflowError as error:
            return None, str(error)

    def started(self, run_id: str, parent: ModelRun | None) -> ModelRun:
        self.store.bind_origin_session(run_id, self.session, execution_mode="interactive")
        run = ModelRun(
            run_id,
            parent=None if parent is None else parent.run_id,
            root=run_id if parent is None else parent.root,
            kind=None if parent is None else "continuation",
            restart_number=0 if parent is None else parent.restart_number,
            parent_outcome=None,
            status="running",
        )
        self.model.runs[run_id] = run
        return run

    @rule(target=runs)
    def create(self) -> str:
        run_id = self.new_id()
        self.store.create_run(run_id, workflow_name="echo", input=INPUT, status="running")
        self.started(run_id, None)
        return run_id

    @rule(target=runs, parent=runs)
    def continue_(self, parent: str) -> str:
        run_id = self.new_id()
        self.store.create_run(
            run_id, workflow_name="echo", input=INPUT, parent_run_id=parent, status="running"
        )
        self.started(run_id, self.model.runs[parent])
        return run_id

    def open_runs(self) -> list[str]:
        return [run.run_id for run in self.model.runs.values() if not run.ended]

    def ended_runs(self) -> list[str]:
        return [run.run_id for run in self.model.runs.values() if run.ended]

    # Few outcomes, so that runs of one tree often end alike (the restart rules' subject).
    @rule(run_id=runs, status=st.sampled_from(ENDS), variant=st.sampled_from([1, 1, 2]))
    def finish(self, run_id: str, status: str, variant: int) -> None:
        run = self.model.runs[run_id]
        if run.status == "queued":
            # A restart child starts with its worker's first progress (decision 9).
            self.store.record_progress(run_id, status="running")
            run.status = "running"
        output = {"variant": variant} if status == "completed" else None
        error = None if status == "completed" else f"boom {variant}"
        record, failure = self.answer(
            self.store.finish_run, run_id, status=status, final_output=output, error=error
        )
        if run.ended:
            assert failure == f"Workflow run {run_id} already ended with status {run.status}"
            return
        assert failure is None, failure
        self.model.finish(run, status, (status, output, error))
        assert record.status == status

    @precondition(lambda self: self.open_runs())
    @rule(pick=st.integers(0, 99), status=st.sampled_from(ENDS), variant=st.sampled_from([1, 1, 2]))
    def finish_an_open_run(self, pick: int, status: str, variant: int) -> None:
        open_runs = self.open_runs()
        self.finish(open_runs[pick % len(open_runs)], status, variant)

    @precondition(lambda self: self.ended_runs())
    @rule(target=runs, pick=st.integers(0, 99))
    def restart_an_ended_run(self, pick: int) -> Any:
        ended = self.ended_runs()
        return self.restart(ended[pick % len(ended)])

    @rule(target=runs, run_id=runs)
    def restart(self, run_id: str) -> Any:
        run = self.model.runs[run_id]
        if run.ended and run.presented is None:
            run.presented = self.present(run_id)
        expected = self.model.restart_answer(run)
        event(f"restart: {expected}")
        receipt, failure = self.answer(
            self.store.restart_run,
            run_id,
            session_id=self.session,
            workflow_message_id=run.presented or "workflow-message-none",
        )
        if expected not in ("new", "adopted"):
            assert failure == expected
            return multiple()
        assert failure is None, f"{failure} (the model says {expected})"
        assert receipt.adopted == (expected == "adopted")
        if expected == "adopted":
            assert receipt.run_id == run.restart_child
            return multiple()
        assert receipt.run_id not in self.model.runs
        run.restart_child = receipt.run_id
        self.model.runs[receipt.run_id] = ModelRun(
            receipt.run_id,
            parent=run_id,
            root=run.root,
            kind="restart",
            restart_number=run.restart_number + 1,
            parent_outcome=run.outcome,
            status="queued",
        )
        return receipt.run_id

    def present(self, run_id: str) -> str:
        """Deliver the ended run's terminal message and run its model turn."""
        [finished] = [
            event
            for event in self.store.event_log(run_id=run_id)
            if event.wire_name == "run.finished"
        ]
        message_id = finished.payload["terminal_message_id"]
        self.store.report_branch(
            self.session, [(message_id, f"entry-{run_id}")], allowed_ids=[message_id]
        )
        turn = self.store.start_turn(
            message_id,
            run_id=run_id,
            target_session_id=self.session,
            workflow_turn_id=f"turn-{self.example}-{next(self.turns)}",
        )
        self.store.end_turn(turn.workflow_turn_id, stop_reason="completed")
        return str(message_id)

    @rule(run_id=runs, request=st.sampled_from(REQUESTS))
    def queue(self, run_id: str, request: str) -> None:
        run = self.model.runs[run_id]
        queued, failure = self.answer(
            self.store.queue_follow_up,
            run_id,
            request_id=request,
            target_session_id=self.session,
            actor=Actor("session", self.session),
            source=SOURCE,
            prompt=f"prompt {request}",
        )
        if request in run.follow_ups:
            # Adoption comes before the run's status is looked at (§4.2 step 5).
            assert failure is None, failure
            assert (queued.adopted, queued.follow_up.state) == (True, run.follow_ups[request])
        elif run.status not in ("running", "waiting"):
            assert failure == (
                f"Workflow run {run_id} does not accept changes with status {run.status}"
            )
        else:
            assert failure is None, failure
            assert (queued.adopted, queued.follow_up.order) == (False, len(run.follow_ups) + 1)
            run.follow_ups[request] = "queued"

    @rule(
        run_id=runs,
        request=st.sampled_from(REQUESTS),
        actor=st.sampled_from(["session", "human", "host"]),
    )
    def remove(self, run_id: str, request: str, actor: str) -> None:
        run = self.model.runs[run_id]
        follow_up_id = follow_up_id_for(run_id, request)
        requester = {
            "session": Actor("session", self.session),
            "human": Actor("human", "user-1"),
            "host": Actor("host"),
        }[actor]
        removed, failure = self.answer(
            self.store.remove_follow_up, run_id, follow_up_id, actor=requester, source=SOURCE
        )
        state = run.follow_ups.get(request)
        if state is None:
            assert failure == f"Workflow follow-up not found: {follow_up_id}"
        elif state == "removed":
            assert failure is None, failure
            assert removed.state == "removed"
        elif state == "cancelled":
            assert failure == "A cancelled workflow follow-up cannot be removed"
        elif actor == "host":
            assert failure == (
                "Workflow follow-up can be removed only by its source or a verified human"
            )
        else:
            assert failure is None, failure
            assert (removed.state, removed.reason) == ("removed", "Removed before delivery")
            run.follow_ups[request] = "removed"

    @invariant()
    def the_store_agrees_with_the_model(self) -> None:
        for run in self.model.runs.values():
            record = self.store.get_run(run.run_id)
            assert record is not None
            assert (
                record.status,
                record.parent_run_id,
                record.root_run_id,
                record.lineage_kind,
                record.restart_number,
            ) == (run.status, run.parent, run.root, run.kind, run.restart_number), run.run_id
            queue = self.store.follow_up_queue(run.run_id)
            assert queue is not None
            assert [(f.request_id, f.state) for f in queue.follow_ups] == list(
                run.follow_ups.items()
            ), run.run_id


def check_machine(store: WorkflowStore, examples: int) -> None:
    LineageMachine.store = store
    run_state_machine_as_test(
        LineageMachine,
        settings=settings(
            settings(),
            max_examples=examples,
            stateful_step_count=40,
            deadline=None,
        ),
    )


@pytest.fixture(params=["memory", "sqlite"])
def machine_store(request: pytest.FixtureRequest, tmp_path) -> Iterator[WorkflowStore]:
    url = "memory://" if request.param == "memory" else f"sqlite:///{tmp_path / 'store.db'}"
    with open_store(url, clock=FakeClock()) as store:
        yield store


def test_random_lineages_follow_the_reference_model(machine_store: WorkflowStore) -> None:
    check_machine(machine_store, examples=30)


@pytest.mark.slow
def test_many_random_lineages_follow_the_reference_model(machine_store: WorkflowStore) -> None:
    check_machine(machine_store, examples=100)
