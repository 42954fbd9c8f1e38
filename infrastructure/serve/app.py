"""The Starlette application: the route table's endpoints, the live viewer stream, the page.

``create_app(runtime, access)`` serves one open store; it never opens or closes it (the
server does, once per process).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from importlib import resources
from typing import Any, Final

from pydantic_core import to_json
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Route as StarletteRoute

from runledger.domain.errors import InvalidViewerCursorError, WorkflowError
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.serve.auth import Access
from runledger.infrastructure.serve.binding import Endpoint, InvalidRequestError, bind
from runledger.infrastructure.serve.broadcast import Item, Keepalive, Snapshot, ViewerBroadcaster
from runledger.infrastructure.serve.console import Console
from runledger.infrastructure.serve.errors import error_response, workflow_error_response
from runledger.infrastructure.serve.hosts import HostCheck
from runledger.infrastructure.serve.notifications import (
    CommitNotifications,
    commit_notifications,
)
from runledger.infrastructure.serve.openapi import openapi_document
from runledger.infrastructure.serve.probes import MetricsEndpoint, Probes, TracedRequests
from runledger.infrastructure.serve.routes import ROUTES
from runledger.infrastructure.serve.snapshot import viewer_snapshot
from runledger.infrastructure.serve.threads import StoreThreads
from runledger.infrastructure.store import WorkflowStore

logger = logging.getLogger(__name__)

Handler = Callable[[Request], Awaitable[Response]]
STREAM_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
MAX_CURSOR_DIGITS: Final = 19
"""A viewer cursor longer than this is refused before ``int()``: more digits than any revision
can have (a 64-bit count), and ``int()`` of a long enough text is slow, then raises."""
REPLAY_PARAMETER: Final = "as_of"
MAX_BODY_BYTES: Final = 16 * 1024 * 1024
"""Far above what the store accepts in one call (1 MiB of text per argument, 100,000
values), and low enough that no client can make the server hold gigabytes."""


class UnauthorisedError(Exception):
    """The request has no bearer token, or a wrong one."""


class BodyTooLargeError(Exception):
    """The request body is larger than ``MAX_BODY_BYTES``."""


async def _body(request: Request) -> bytes:
    """The request body, read no further than ``MAX_BODY_BYTES``."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise BodyTooLargeError()
        chunks.append(chunk)
    return b"".join(chunks)


@functools.cache
def _endpoints() -> tuple[Endpoint, ...]:
    # The table and the signatures are fixed for the process: bind and describe them once.
    return tuple(bind(route) for route in ROUTES)


@functools.cache
def _openapi() -> dict[str, Any]:
    return openapi_document(_endpoints())


def _page() -> str:
    return (resources.files(__package__) / "static" / "viewer.html").read_text("utf-8")


def _event(item: Item) -> str:
    """One item as server-sent event text."""
    if isinstance(item, Keepalive):
        return ": keepalive\n\n"
    if isinstance(item, Snapshot):
        snapshot = {"current_revision": item.current, "retained_from_revision": item.retained_from}
        return f"id: {item.current}\nevent: snapshot_required\ndata: {json.dumps(snapshot)}\n\n"
    revision = {"presentation_revision": item.revision, "deltas": item.deltas}
    return f"id: {item.revision}\nevent: revision\ndata: {json.dumps(revision)}\n\n"


def _cursor(request: Request) -> int:
    # An EventSource resumes with Last-Event-ID on the URL it first opened: the header wins.
    given = request.headers.get("last-event-id") or request.query_params.get("after_revision")
    if given is None:
        return 0
    if not given.isascii() or not given.isdigit() or len(given) > MAX_CURSOR_DIGITS:
        raise InvalidViewerCursorError()
    return int(given)


class Server:
    """The handlers of one app, over one store, one access rule and one broadcaster."""

    def __init__(
        self, runtime: StoreRuntime, access: Access, metrics: MetricsEndpoint | None = None
    ) -> None:
        self.runtime = runtime
        self.store = WorkflowStore(runtime)
        self.access = access
        self.threads = StoreThreads()
        """Where every blocking call of the store runs (never Starlette's thread pool)."""
        self.broadcaster = ViewerBroadcaster(self.store, self.threads)
        self.probes = Probes(runtime, access, metrics, lambda: self.broadcaster.clients)
        self.endpoints = _endpoints()
        self.notifications: CommitNotifications | None = None
        self.console = Console(
            self.store,
            runtime,
            lambda request, writes: self.check(request, writes=writes),
            lambda request, writes: self.access.allows(request, writes=writes),
            self.threads,
        )

    def check(self, request: Request, *, writes: bool) -> None:
        """Refuse a request without the access it needs."""
        if not self.access.allows(request, writes=writes):
            raise UnauthorisedError()

    def handler(self, rows: Sequence[Endpoint]) -> Handler:
        """The handler of the table rows sharing one method and path."""

        async def handle(request: Request) -> Response:
            given = request.query_params.keys()
            endpoint = next(row for row in rows if row.route.requires <= given or row is rows[-1])
            # A read as of a log position replays the log up to there: only for the token's
            # holders, so that public reads cannot make the server replay at will.
            self.check(request, writes=endpoint.writes or REPLAY_PARAMETER in given)
            body = await _body(request) if endpoint.writes else None
            arguments = endpoint.arguments(request.path_params, request.query_params, body)
            answer = await self.threads.run(endpoint.call, self.store, arguments)
            # Records to JSON in one pass in pydantic's core (snake_case, as they dump).
            return Response(
                to_json(answer), status_code=endpoint.route.status, media_type="application/json"
            )

        return handle

    async def viewer(self, request: Request) -> Response:
        """Server-sent events of the run's viewer revisions, live."""
        self.check(request, writes=False)
        run_id = request.path_params["run_id"]
        items = await self.broadcaster.stream(run_id, _cursor(request))

        async def events() -> AsyncIterator[str]:
            # Sent at once, so a client knows the stream is open before the first change.
            yield ": open\n\n"
            async for item in items:
                yield _event(item)

        return StreamingResponse(events(), media_type="text/event-stream", headers=STREAM_HEADERS)

    async def snapshot(self, request: Request) -> Response:
        """The run's viewer documents at one revision."""
        self.check(request, writes=False)
        documents = await self.threads.run(
            viewer_snapshot, self.store, request.path_params["run_id"]
        )
        return JSONResponse(documents)

    async def openapi_json(self, _request: Request) -> Response:
        """The OpenAPI document (public: it holds no data)."""
        return JSONResponse(_openapi())

    async def page(self, _request: Request) -> Response:
        """The viewer page (public: it asks for the token and holds no data)."""
        return HTMLResponse(_page())

    def routes(self) -> list[StarletteRoute]:
        """Every route: the table's, grouped by method and path, then the viewer's."""
        grouped: dict[tuple[str, str], list[Endpoint]] = {}
        for endpoint in self.endpoints:
            grouped.setdefault((endpoint.route.method, endpoint.route.path), []).append(endpoint)
        table = [
            StarletteRoute(path, self.handler(rows), methods=[method])
            for (method, path), rows in grouped.items()
        ]
        return [
            StarletteRoute("/", self.page, methods=["GET"]),
            StarletteRoute("/openapi.json", self.openapi_json, methods=["GET"]),
            StarletteRoute("/runs/{run_id}/viewer", self.viewer, methods=["GET"]),
            StarletteRoute("/runs/{run_id}/viewer/snapshot", self.snapshot, methods=["GET"]),
            *self.console.routes(),
            *self.probes.routes(),
            *table,
        ]

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        """Follow the store's changes while the server runs."""
        self.broadcaster.start()
        self.console.feed.start()
        remove = self.runtime.add_views_listener(self.broadcaster.views_advanced)
        remove_feed = self.runtime.add_views_listener(self.console.feed.views_advanced)
        self.notifications = commit_notifications(self.runtime, self.broadcaster.views_advanced)
        if self.notifications is not None:
            self.notifications.start()
        try:
            yield
        finally:
            if self.notifications is not None:
                await self.threads.run(self.notifications.stop)
            remove()
            remove_feed()
            self.console.feed.stop()
            await self.broadcaster.stop()
            await asyncio.to_thread(self.threads.close)


async def _workflow_error(_request: Request, error: Exception) -> Response:
    if not isinstance(error, WorkflowError):  # registered for this class only
        raise error
    return workflow_error_response(error)


async def _invalid_request(_request: Request, error: Exception) -> Response:
    message = error.message if isinstance(error, InvalidRequestError) else str(error)
    return error_response(422, InvalidRequestError.code, message)


async def _unauthorised(_request: Request, _error: Exception) -> Response:
    response = error_response(401, "auth.required", "A valid bearer token is required")
    response.headers["WWW-Authenticate"] = "Bearer"
    return response


async def _body_too_large(_request: Request, _error: Exception) -> Response:
    message = f"Request body exceeds {MAX_BODY_BYTES} bytes"
    return error_response(413, "request.too-large", message)


async def _http_error(_request: Request, error: Exception) -> Response:
    status = error.status_code if isinstance(error, HTTPException) else 500
    code = {404: "route.not-found", 405: "route.method-not-allowed"}.get(status, "http.error")
    detail = error.detail if isinstance(error, HTTPException) else "Internal Server Error"
    return error_response(status, code, str(detail))


async def _server_error(_request: Request, error: Exception) -> Response:
    logger.error("request failed", exc_info=error)
    return error_response(500, "server.error", "Internal server error")


def create_app(
    runtime: StoreRuntime,
    access: Access,
    *,
    allowed_hosts: Sequence[str] = (),
    metrics: MetricsEndpoint | None = None,
) -> Starlette:
    """The HTTP application over an open store (which it leaves open).

    It answers only requests naming the address they arrived at (a loopback name on a
    loopback address) or one of ``allowed_hosts`` (see ``hosts``).
    """
    server = Server(runtime, access, metrics)
    handlers: dict[Any, Callable[[Request, Exception], Awaitable[Response]]] = {
        WorkflowError: _workflow_error,
        InvalidRequestError: _invalid_request,
        UnauthorisedError: _unauthorised,
        BodyTooLargeError: _body_too_large,
        HTTPException: _http_error,
        Exception: _server_error,
    }
    app = Starlette(
        routes=server.routes(),
        exception_handlers=handlers,
        lifespan=server.lifespan,
        middleware=[Middleware(HostCheck, allowed=allowed_hosts), Middleware(TracedRequests)],
    )
    app.state.server = server
    return app


__all__: Sequence[str] = ["Server", "create_app"]
