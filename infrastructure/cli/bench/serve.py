"""``runledger serve`` measured: HTTP commands next to in-process ones, and command → SSE delta.

Each measurement takes a new, empty database (``Bench.scratch.new_url()``), starts the real
``runledger serve`` on it as a separate process on a free port, drives it with httpx over
TCP as a host in another language would, and stops it with SIGTERM.
"""

from __future__ import annotations

import os
import re
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Final

import httpx

from runledger.domain.values import Actor
from runledger.infrastructure.cli.bench.runner import BenchResult, percentile
from runledger.infrastructure.store import WorkflowStore, open_store

TOKEN: Final = secrets.token_urlsafe(24)
START_SECONDS: Final = 30
DELTA_GOAL_MS: Final = 50.0
FOLLOW_UPS_PER_RUN: Final = 100


@dataclass(frozen=True)
class _Server:
    base_url: str
    process: subprocess.Popen[str]


@contextmanager
def served(url: str) -> Iterator[_Server]:
    """``runledger serve`` on ``url`` in its own process, until the block ends."""
    env = {**os.environ, "RUNLEDGER_SERVE_TOKEN": TOKEN}
    command = [sys.executable, "-m", "runledger.infrastructure.cli", "serve", "--url", url]
    process = subprocess.Popen(  # noqa: S603 - this interpreter running runledger's own CLI
        [*command, "--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    try:
        banner = process.stdout.readline() if process.stdout is not None else ""
        listening = re.search(r"(http://127\.0\.0\.1:\d+)/", banner)
        if listening is None:
            raise RuntimeError("runledger serve did not start")
        yield _Server(listening.group(1), process)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=START_SECONDS)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _client(server: _Server) -> httpx.Client:
    headers = {"Authorization": f"Bearer {TOKEN}"}
    return httpx.Client(base_url=server.base_url, headers=headers, timeout=30)


def _text(number: int, session_id: str = "s1-local-session") -> dict[str, str]:
    """Follow-up ``number`` of a Pi session, as the runner's P1 queues it."""
    return {
        "request_id": f"request-{number}",
        "target_session_id": session_id,
        "source": "pi-session",
        "prompt": f"Follow-up {number}: check the edge cases.",
    }


def _follow_up(number: int, session_id: str) -> dict[str, Any]:
    return {**_text(number, session_id), "actor": {"type": "session", "id": session_id}}


def _prepare_over_http(client: httpx.Client, run_id: str, session_id: str) -> None:
    for path, body in (
        ("/runs", {"run_id": run_id, "workflow_name": "bench", "input": {"n": 1}}),
        (f"/runs/{run_id}/session", {"session_id": session_id}),
    ):
        client.post(path, json=body).raise_for_status()


def _in_process_rate(store: WorkflowStore, seconds: float) -> float:
    session_id = "s1-local-session"
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        run_id = f"s1-local-{count // FOLLOW_UPS_PER_RUN}"
        if count % FOLLOW_UPS_PER_RUN == 0:
            store.create_run(run_id, workflow_name="bench", input={"n": 1})
            store.bind_origin_session(run_id, session_id)
        store.queue_follow_up(run_id, actor=Actor("session", session_id), **_text(count))
        count += 1
    return count / (time.perf_counter() - started)


def http_queue_follow_up(url: str, seconds: float) -> BenchResult:
    """S1: queue_follow_up requests per second over HTTP (one keep-alive client) next to the
    same commands in-process on the same backend."""
    with open_store(url) as store:
        baseline = _in_process_rate(store, seconds)
    with served(url) as server, _client(server) as client:
        count = 0
        started = time.perf_counter()
        while time.perf_counter() - started < seconds:
            run_id = f"s1-http-{count // FOLLOW_UPS_PER_RUN}"
            if count % FOLLOW_UPS_PER_RUN == 0:
                _prepare_over_http(client, run_id, "s1-http-session")
            client.post(
                f"/runs/{run_id}/follow-ups", json=_follow_up(count, "s1-http-session")
            ).raise_for_status()
            count += 1
        rate = count / (time.perf_counter() - started)
    return BenchResult(
        id="S1",
        name="queue_follow_up over HTTP (runledger serve, one client) vs in-process",
        value=rate,
        unit="requests/s",
        baseline=baseline,
        ratio=rate / baseline,
        goal="report: HTTP next to the in-process P1 work",
        met=True,
    )


class _Arrivals:
    """The moment each revision's event reached an SSE client reading on its own thread."""

    def __init__(self, client: httpx.Client, path: str) -> None:
        self._client = client
        self._path = path
        self._seen: dict[int, float] = {}
        self._changed = threading.Condition()
        self._open = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)

    def __enter__(self) -> _Arrivals:
        self._thread.start()
        if not self._open.wait(START_SECONDS):
            raise RuntimeError("the viewer stream did not open")
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()

    def _read(self) -> None:
        try:
            with self._client.stream("GET", self._path) as response:
                for line in response.iter_lines():
                    now = time.perf_counter()
                    if line == ": open":
                        self._open.set()
                    elif line.startswith("id: "):
                        with self._changed:
                            self._seen[int(line.removeprefix("id: "))] = now
                            self._changed.notify_all()
        except httpx.HTTPError:
            # Closing the client at the end cuts the stream; before that it is a failure,
            # which shows as the revision that never arrived.
            if not self._stop.is_set():
                raise

    def wait_for(self, revision: int) -> float:
        """When ``revision`` arrived (waiting for it)."""
        with self._changed:
            if not self._changed.wait_for(lambda: revision in self._seen, START_SECONDS):
                raise RuntimeError(f"revision {revision} never arrived")
            return self._seen[revision]


def command_to_sse_delta(url: str, samples: int) -> BenchResult:
    """S2: milliseconds from sending queue_follow_up over HTTP to its viewer delta reaching
    an SSE client of the run (p99; the name gives p50, and the part after the command's own
    answer, which is what serving the stream adds)."""
    with served(url) as server, _client(server) as client, _client(server) as reader:
        _prepare_over_http(client, "s2", "s2-session")
        revision = client.get("/runs/s2/viewer-deltas", params={"after_revision": 1}).json()[
            "current_revision"
        ]
        latencies = []
        after_answer = []
        with _Arrivals(reader, f"/runs/s2/viewer?after_revision={revision}") as arrivals:
            for number in range(samples):
                started = time.perf_counter()
                client.post(
                    "/runs/s2/follow-ups", json=_follow_up(number, "s2-session")
                ).raise_for_status()
                answered = time.perf_counter()
                revision += 1
                arrived = arrivals.wait_for(revision)
                latencies.append((arrived - started) * 1000)
                after_answer.append(max(0.0, arrived - answered) * 1000)
    p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    tail = f"after its answer p50 {percentile(after_answer, 0.5):.1f} / p99 "
    tail += f"{percentile(after_answer, 0.99):.1f} ms"
    return BenchResult(
        id="S2",
        name=f"queue_follow_up over HTTP -> its delta at an SSE client (p50 {p50:.1f} ms; {tail})",
        value=p99,
        unit="ms p99",
        baseline=None,
        ratio=None,
        goal=f"p99 <= {DELTA_GOAL_MS:g} ms",
        met=p99 <= DELTA_GOAL_MS,
    )


__all__ = ["command_to_sse_delta", "http_queue_follow_up", "served"]
