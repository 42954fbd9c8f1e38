"""The scale-out soak's hosts: processes that each open their own store on one PostgreSQL and
run a mix of every kind of command until a deadline, journalling what was acknowledged.

A host writes one JSON line per acknowledged command to its journal (flushed before the next
command, so a line is never claimed for a command that was not acknowledged), and one line per
read-your-writes check. The soak test then holds the journals against the stored history:
every acknowledged command stored exactly once, every check held.

Hosts pass position tokens round a ring: host ``i`` hands the token of each run it finished to
host ``i + 1``, which must then read that run as finished, from whichever server it reads,
through ``reading_after``. That is the cross-process half of read-your-writes; the same-process
half is a read right after each command.
"""

from __future__ import annotations

import json
import queue
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tests.support.sessions import session_events

if TYPE_CHECKING:
    import multiprocessing

    from runledger.infrastructure.store import WorkflowStore

SHARED_RUN = "soak-shared"
"""The run every host queues follow-ups on, so that commands of all hosts contend on one run."""
SHARED_SESSION = "soak-shared-session"
POLICY = {"rules": [{"path": "/notes", "permissions": {"human": ["add"]}}]}


class Journal:
    """One host's record of what it was told succeeded, line by line."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("a", encoding="utf-8")

    def write(self, **line: Any) -> None:
        self._file.write(json.dumps(line) + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def read_journals(folder: Path) -> list[dict[str, Any]]:
    """Every line every host journalled."""
    lines: list[dict[str, Any]] = []
    for path in sorted(folder.glob("host-*.jsonl")):
        lines.extend(json.loads(text) for text in path.read_text().splitlines() if text)
    return lines


def _one_run(store: WorkflowStore, journal: Journal, host: int, n: int, embedded: bool) -> str:
    """A whole run's life: every kind of command a host sends, each journalled when acked."""
    from runledger.domain import Actor

    run_id = f"soak-h{host}-r{n}"
    session = f"soak-session-h{host}"
    store.create_run(run_id, workflow_name="soak", input={"host": host, "n": n})
    journal.write(kind="run", run_id=run_id)
    store.bind_origin_session(run_id, session)
    claim = store.claim_run(run_id, owner_type="system", owner_id=f"host-{host}")
    if claim is None:
        journal.write(kind="check_failed", what="claim of a new run", run_id=run_id)
        return run_id
    store.record_progress(run_id, status="running", current_node="step", authority=claim)
    for k in range(2):
        _follow_up(store, journal, run_id, session, f"h{host}-r{n}-q{k}")
    scope = store.ensure_settings_scope(run_id, settings={"notes": []}, policy=POLICY)
    change = store.change_settings(
        run_id,
        scope.scope_id,
        request_id=f"h{host}-r{n}-note",
        actor=Actor("human", "soak"),
        source="soak",
        patch=[{"op": "add", "path": "/notes/-", "value": n}],
    )
    journal.write(kind="settings", run_id=run_id, change_number=change.change.change_number)
    store.record_session_binding(
        run_id,
        {
            "schema": "pi-workflows.session-binding.v1",
            "runId": run_id,
            "piSessionId": session,
            "boundAt": "2026-01-01T00:00:00.000Z",
        },
        authority=claim,
    )
    store.append_session_events(run_id, session_events(1, 8), authority=claim)
    store.update_session_capture(
        run_id,
        {
            "schema": "pi-workflows.session-capture.v1",
            "eventSchema": "pi-workflows.session-event.v1",
            "status": "complete",
            "entryCount": 0,
            "eventCount": 8,
        },
        authority=claim,
    )
    journal.write(kind="session_events", run_id=run_id, count=8)
    reservation = store.reserve_effect(
        run_id, effect_type="email", key=f"mail-{n}", request={"to": "soak"}, authority=claim
    )
    store.settle_effect(
        reservation.effect.effect_id,
        attempt=reservation.effect.attempt,
        outcome="applied",
        authority=claim,
    )
    journal.write(kind="effect", run_id=run_id, effect_id=reservation.effect.effect_id)
    store.finish_run(run_id, status="completed", final_output={"n": n}, authority=claim)
    journal.write(kind="finished", run_id=run_id)
    # Read-your-writes in this process: the finished run and (where this process projects)
    # its read models, right after the command.
    run = store.get_run(run_id)
    if run is None or run.status != "completed":
        journal.write(kind="check_failed", what="own run read", run_id=run_id)
    if embedded and store.terminal_data(run_id) is None:
        journal.write(kind="check_failed", what="own terminal data", run_id=run_id)
    return run_id


def _follow_up(
    store: WorkflowStore, journal: Journal, run_id: str, session: str, request_id: str
) -> None:
    """Queue a follow-up from the run's session; journalled once acknowledged."""
    from runledger.domain import Actor

    queued = store.queue_follow_up(
        run_id,
        request_id=request_id,
        target_session_id=session,
        actor=Actor("session", session),
        source="soak",
        prompt=f"follow-up {request_id}",
    )
    journal.write(
        kind="follow_up",
        run_id=run_id,
        request_id=request_id,
        follow_up_id=queued.follow_up.follow_up_id,
        order=queued.follow_up.order,
    )


def _check_tokens(
    store: WorkflowStore, journal: Journal, inbox: multiprocessing.Queue[Any]
) -> None:
    """Read, through the tokens a neighbour passed, the runs it finished."""
    while True:
        try:
            run_id, token = inbox.get_nowait()
        except queue.Empty:
            return
        store.reading_after(token)
        run = store.get_run(run_id)
        held = run is not None and run.status == "completed"
        journal.write(kind="token_check", run_id=run_id, held=held)


def host_main(
    host: int,
    url: str,
    journal_path: str,
    deadline: float,
    embedded: bool,
    inbox: multiprocessing.Queue[Any],
    neighbour: multiprocessing.Queue[Any],
) -> None:
    """Run commands until ``deadline`` (``time.time()``), journalling each acknowledgement."""
    from runledger.domain.errors import WorkflowError
    from runledger.infrastructure.store import open_store

    journal = Journal(Path(journal_path))
    try:
        with open_store(url, embedded_projections=embedded) as store:
            n = 0
            while time.time() < deadline:
                n += 1
                try:
                    run_id = _one_run(store, journal, host, n, embedded)
                    neighbour.put((run_id, store.position_token()))
                    _follow_up(store, journal, SHARED_RUN, SHARED_SESSION, f"shared-h{host}-{n}")
                    _check_tokens(store, journal, inbox)
                except WorkflowError as error:
                    # A storage fault is retryable and leaves the command unacknowledged; any
                    # other refusal is a defect the soak reports.
                    journal.write(
                        kind="error",
                        n=n,
                        code=error.code,
                        retryable=bool(getattr(error, "retryable", False)),
                        message=str(error),
                    )
            journal.write(kind="done", runs=n)
    except BaseException:
        journal.write(kind="crash", traceback=traceback.format_exc())
        raise
    finally:
        journal.close()
