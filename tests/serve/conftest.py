"""A real ``runledger serve`` app under uvicorn on a free port, over each backend.

One uvicorn server runs in a thread of the test process for the whole session and serves
each test's app, over that test's new store (the SIGTERM tests start the real command as a
subprocess instead); tests talk to it over TCP with httpx, as any host would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import uvicorn

from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.serve.app import create_app
from runledger.infrastructure.serve.auth import Access
from runledger.infrastructure.serve.probes import MetricsEndpoint
from runledger.infrastructure.serve.routes import ROUTES, Route
from runledger.infrastructure.serve.server import listening_socket
from runledger.infrastructure.store import WorkflowStore

TOKEN = "test-token-0123456789"

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]


def route_of(call: str) -> Route:
    """The first table row calling ``call``."""
    return next(route for route in ROUTES if route.call == call)


class Api:
    """Calls the API by store method name, so a test reads like the Python API it mirrors."""

    def __init__(self, client: httpx.Client) -> None:
        self.client = client

    def call(self, call: str, *path: Any, **arguments: Any) -> httpx.Response:
        """``store.<call>(*path, **arguments)`` over HTTP (query for GET, JSON body for POST)."""
        route = route_of(call)
        names = re.findall(r"{([a-z_]+(?::path)?)}", route.path)
        url = route.path
        for name, value in zip(names, path, strict=True):
            # A {name:path} segment may hold slashes; any other one is a single segment.
            safe = "/" if name.endswith(":path") else ""
            url = url.replace("{" + name + "}", quote(str(value), safe=safe))
        if route.method == "GET":
            return self.client.get(url, params=arguments)
        return self.client.post(url, json=arguments)

    def ok(self, call: str, *path: Any, **arguments: Any) -> Any:
        """The JSON answer of a call that must succeed."""
        response = self.call(call, *path, **arguments)
        assert response.status_code == route_of(call).status, response.text
        return response.json()


@dataclass
class Served:
    """A running server, its store and an authorised client."""

    base_url: str
    runtime: StoreRuntime
    api: Api
    anonymous: httpx.Client

    @property
    def store(self) -> WorkflowStore:
        return WorkflowStore(self.runtime)


class SharedHost:
    """One uvicorn server for the whole test session, serving each test's app in turn.

    Starting and stopping uvicorn costs about 0.3 s (its loop ticks every 0.1 s), which made
    up most of these tests' time; a test's app is mounted here instead, with its own lifespan
    (the broadcaster following that test's store) run on the server's event loop.
    """

    def __init__(self) -> None:
        self.sock = listening_socket("127.0.0.1", 0)
        self.base_url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.app: Any = None
        self.loop: asyncio.AbstractEventLoop | None = None
        config = uvicorn.Config(self, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(
            target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True
        )
        # Shared too: making an httpx client (its TLS context) costs tens of milliseconds.
        headers = {"Authorization": f"Bearer {TOKEN}"}
        self.client = httpx.Client(base_url=self.base_url, headers=headers, timeout=10)
        self.anonymous = httpx.Client(base_url=self.base_url, timeout=10)

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            self.loop = asyncio.get_running_loop()
            while True:
                message = await receive()
                await send({"type": message["type"] + ".complete"})
                if message["type"] == "lifespan.shutdown":
                    return
        await self.app(scope, receive, send)

    def start(self) -> None:
        self.thread.start()
        while not self.server.started:
            if not self.thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.01)

    def _on_loop(self, coroutine: Any) -> Any:
        assert self.loop is not None
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout=10)

    @contextlib.contextmanager
    def mounted(
        self,
        runtime: StoreRuntime,
        access: Access,
        allowed_hosts: tuple[str, ...] = (),
        metrics: MetricsEndpoint | None = None,
    ) -> Iterator[None]:
        """Serve an app over ``runtime`` (with ``/metrics`` if given) while the block runs."""
        app = create_app(runtime, access, allowed_hosts=allowed_hosts, metrics=metrics)
        lifespan = app.state.server.lifespan(app)
        self._on_loop(lifespan.__aenter__())
        self.app = app
        try:
            yield
        finally:
            self._on_loop(lifespan.__aexit__(None, None, None))
            self.app = None

    def stop(self) -> None:
        self.client.close()
        self.anonymous.close()
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


@pytest.fixture(scope="session")
def shared_host() -> Iterator[SharedHost]:
    host = SharedHost()
    host.start()
    yield host
    host.stop()


@pytest.fixture(params=BACKENDS)
def serve_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store on the parametrised backend."""
    if request.param == "memory":
        return "memory://"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runledger.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


@pytest.fixture(params=[b for b in BACKENDS if b.id != "memory"])
def durable_serve_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store that other stores can open too: a SQLite file or a database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runledger.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


@pytest.fixture
def served_durable(shared_host: SharedHost, durable_serve_url: str) -> Iterator[Served]:
    """A server on a SQLite file or a PostgreSQL database."""
    yield from serving(shared_host, durable_serve_url)


def serving(
    host: SharedHost,
    url: str,
    *,
    public_reads: bool = False,
    allowed_hosts: tuple[str, ...] = (),
) -> Iterator[Served]:
    """The app over a new store at ``url``, served by ``host`` while the generator runs."""
    with (
        open_runtime(url) as runtime,
        host.mounted(runtime, Access(TOKEN, public_reads=public_reads), allowed_hosts),
    ):
        yield Served(host.base_url, runtime, Api(host.client), host.anonymous)


@pytest.fixture
def served(shared_host: SharedHost, serve_url: str) -> Iterator[Served]:
    """A server on a new store of each backend."""
    yield from serving(shared_host, serve_url)


@pytest.fixture
def served_memory(shared_host: SharedHost) -> Iterator[Served]:
    """A server on a memory store: for what does not depend on the backend."""
    yield from serving(shared_host, "memory://")


# -- server-sent events ----------------------------------------------------------------------


@dataclass(frozen=True)
class Event:
    """One server-sent event."""

    name: str
    id: str | None
    data: Any


class EventStream:
    """Reads the events of an open ``text/event-stream`` response, one at a time."""

    def __init__(self, response: httpx.Response) -> None:
        self.response = response
        self.lines = response.iter_lines()
        self.comments: list[str] = []

    def next(self) -> Event:
        """The next event (comments, such as the ``: open`` greeting, are kept aside)."""
        name, event_id, data = "message", None, ""
        for line in self.lines:
            if line.startswith(":"):
                self.comments.append(line)
            elif line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("id: "):
                event_id = line.removeprefix("id: ")
            elif line.startswith("data: "):
                data += line.removeprefix("data: ")
            elif line == "" and data:
                return Event(name, event_id, json.loads(data))
        raise AssertionError("the stream ended")

    def wait_open(self) -> None:
        """Until the server's greeting: from then on, no change is missed."""
        for line in self.lines:
            if line == ": open":
                return
        raise AssertionError("the stream ended before it opened")


def queue_follow_up(api: Api, run_id: str, request_id: str, prompt: str = "next") -> Any:
    """Queue a follow-up from the run's origin session ``session-1``."""
    return api.ok(
        "queue_follow_up",
        run_id,
        request_id=request_id,
        target_session_id="session-1",
        actor={"type": "session", "id": "session-1"},
        source="chat",
        prompt=prompt,
    )


def started_run(api: Api, run_id: str = "run-1") -> Any:
    """A running run bound to ``session-1``."""
    api.ok("create_run", run_id=run_id, workflow_name="echo", input={"task": "reply"})
    return api.ok("bind_origin_session", run_id, session_id="session-1")
