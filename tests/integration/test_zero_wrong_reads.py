"""No query sees a half-built model while a blue/green rebuild switches, on a SQLite file and
PostgreSQL.

A writer keeps queueing follow-ups (each adds one message to the session's outbox) on one
store while a reader keeps asking for the outbox on another, and a third rebuilds the outbox
blue/green (dropping the old tables) twice meanwhile. Every answer the reader got must be
the model's answer at some moment: the answer ``as_of`` the position right after the command
that made the outbox that long.
"""

from __future__ import annotations

import threading
from typing import Any

from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.support.scenario import SESSION, queued_id, running_run

NAME = "session_outbox"
COMMANDS = 120
REBUILDS_AT = (30, 70)
"""The writer's command counts at which a rebuild starts."""


def plain(messages: list[Any]) -> list[Any]:
    return [message.model_dump(mode="json") for message in messages]


def test_every_answer_during_blue_green_switches_is_an_answer_of_a_whole_model(
    durable_url: str,
) -> None:
    with (
        open_runtime(durable_url) as writer_runtime,
        open_runtime(durable_url) as reader_runtime,
    ):
        writer, reader = WorkflowStore(writer_runtime), WorkflowStore(reader_runtime)
        running_run(writer)
        positions = {0: writer_runtime.storage.max_position()}
        answers: list[list[Any]] = []
        failures: list[BaseException] = []
        written = threading.Semaphore(0)
        read_once = threading.Semaphore(0)
        done = threading.Event()

        def write() -> None:
            try:
                for number in range(1, COMMANDS + 1):
                    # A read between any two commands, however the threads are scheduled (on a
                    # loaded machine the writer once finished before the reader read twice).
                    read_once.acquire(timeout=30)
                    queued_id(writer, f"request-{number}", prompt=f"Task {number}")
                    positions[number] = writer_runtime.storage.max_position()
                    written.release()
            except BaseException as error:
                failures.append(error)
                raise
            finally:
                done.set()

        def read() -> None:
            try:
                while not done.is_set():
                    answers.append(plain(reader.session_outbox(SESSION)))
                    read_once.release()
                answers.append(plain(reader.session_outbox(SESSION)))
            except BaseException as error:
                failures.append(error)
                raise

        threads = [threading.Thread(target=write), threading.Thread(target=read)]
        for thread in threads:
            thread.start()
        outcomes = []
        with open_runtime(durable_url, embedded_projections=False) as operator:
            count = 0
            for at in REBUILDS_AT:
                while count < at:
                    written.acquire()
                    count += 1
                outcomes.extend(operator.rebuild_blue_green([NAME], drop_old=True))
        for thread in threads:
            thread.join(timeout=120)

        assert not failures, failures
        assert [outcome.switched for outcome in outcomes] == [True, True]
        expected = {
            length: plain(reader.session_outbox(SESSION, as_of=positions[length]))
            for length in {len(answer) for answer in answers}
        }
        wrong = [answer for answer in answers if answer != expected[len(answer)]]

    assert len(answers) > len(REBUILDS_AT), "the reader must have read during the run"
    assert len(answers[-1]) == COMMANDS
    assert wrong == [], f"{len(wrong)} of {len(answers)} answers were of no whole model"
