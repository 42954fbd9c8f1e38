"""The run console's routes: its page and files, the JSON it reads, and the live runs feed.

The console is plain ES modules and CSS in ``static/`` (shipped in the wheel, no build step).
Its page is public, as the viewer's was: it holds no data and asks for the token. Every data
route needs read access; whether the token may write is asked of ``/console/api/access``, so
the page offers the decision form only when an answer would be accepted.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
import tempfile
from collections.abc import AsyncIterator, Callable, Sequence
from importlib import resources
from pathlib import Path
from typing import Any, Final, TypeVar

import pydantic
from pydantic import BaseModel, ConfigDict, Field
from pydantic_core import to_json
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response, StreamingResponse
from starlette.routing import Route

from runledger.domain.arguments import check_arguments
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.serve.binding import InvalidRequestError
from runledger.infrastructure.serve.console_reads import (
    LOG_PAGE,
    MAX_EVENTS_PAGE,
    RunLogs,
    log_after,
    newest_runs,
    run_events,
    run_overview,
    runs_by_id,
)
from runledger.infrastructure.serve.errors import error_response
from runledger.infrastructure.serve.threads import StoreThreads
from runledger.infrastructure.store import WorkflowStore

Check = Callable[[Request, bool], None]
"""Refuses (raises) a request without read access, or write access when the flag is set."""
Allows = Callable[[Request, bool], bool]
"""Whether a request has read access, or write access when the flag is set."""

STATIC: Final = resources.files(__package__) / "static"
CONTENT_TYPES: Final = {
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".html": "text/html; charset=utf-8",
    ".txt": "text/plain; charset=utf-8",
}
STATIC_NAME: Final = re.compile(r"[a-z][a-z0-9-]*\.(js|css|txt)")
FEED_POLL_SECONDS: Final = 2.0
"""How long the feed waits for a wake-up before looking at the log itself: another process's
write reaches this one through its follower, and this bounds the wait if no wake-up comes."""
KEEPALIVE_EVERY: Final = 7
STREAM_HEADERS: Final = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class _Query(BaseModel):
    model_config = ConfigDict(extra="forbid")


class RunsQuery(_Query):
    """The runs list's filters and page."""

    status: str | None = None
    workflow: str | None = None
    session: str | None = None
    root: str | None = None
    id: str | None = None
    before: str | None = None
    limit: int = Field(50, ge=1, le=1000)

    def filters(self) -> dict[str, str]:
        """The filters as runs read model columns."""
        given = {
            "status": self.status,
            "workflow_name": self.workflow,
            "origin_session_id": self.session,
            "root_run_id": self.root,
            "run_id": self.id,
        }
        return {column: value for column, value in given.items() if value}


class EventsQuery(_Query):
    """A page of one run's event history."""

    after: int = Field(0, ge=0)
    limit: int = Field(200, ge=1, le=MAX_EVENTS_PAGE)
    wire_name: str | None = None


class FeedQuery(_Query):
    """Where the runs feed starts: the log position the list was read at."""

    after: int = Field(0, ge=0)


Q = TypeVar("Q", bound=_Query)


def _parse(model: type[Q], request: Request) -> Q:
    try:
        query = model.model_validate(dict(request.query_params))
    except pydantic.ValidationError as error:
        problem = error.errors()[0]
        where = ".".join(str(part) for part in problem["loc"])
        raise InvalidRequestError(f"{where}: {problem['msg']}") from None
    check_arguments((), (), query.model_dump())
    return query


def _json(answer: Any) -> Response:
    return Response(to_json(answer), media_type="application/json")


def static_file(name: str) -> tuple[bytes, str] | None:
    """A console file's bytes and content type, or None for a name that is not one."""
    if not STATIC_NAME.fullmatch(name):
        return None
    resource = STATIC / name
    if not resource.is_file():
        return None
    return resource.read_bytes(), CONTENT_TYPES[Path(name).suffix]


class RunsFeed:
    """Wakes every runs-feed client when the store's read models may have advanced."""

    def __init__(self) -> None:
        self._waiters: set[asyncio.Event] = set()
        self._loop: asyncio.AbstractEventLoop | None = None

    def start(self) -> None:
        """Start waking clients (on the server's event loop)."""
        self._loop = asyncio.get_running_loop()

    def views_advanced(self) -> None:
        """The store's listener: called on any thread, it only wakes the event loop."""
        loop = self._loop
        if loop is not None and not loop.is_closed():
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        for waiter in self._waiters:
            waiter.set()

    def stop(self) -> None:
        """End every feed (the server is stopping)."""
        self._loop = None
        self._wake()

    async def wait(self, waiter: asyncio.Event) -> bool:
        """Until woken or the poll interval passed; False once the server is stopping."""
        if self._loop is None:
            return False
        with contextlib.suppress(TimeoutError):  # the poll interval passed: look anyway
            await asyncio.wait_for(waiter.wait(), timeout=FEED_POLL_SECONDS)
        waiter.clear()
        return self._loop is not None

    def join(self, waiter: asyncio.Event) -> None:
        """Wake ``waiter`` from now on."""
        self._waiters.add(waiter)

    def leave(self, waiter: asyncio.Event) -> None:
        """Stop waking ``waiter``."""
        self._waiters.discard(waiter)


def _feed_event(position: int, runs: Sequence[Any]) -> str:
    data = to_json({"position": position, "runs": runs}).decode()
    return f"id: {position}\nevent: runs\ndata: {data}\n\n"


class Console:
    """The console's handlers over one store, behind the server's access check."""

    def __init__(
        self,
        store: WorkflowStore,
        runtime: StoreRuntime,
        check: Check,
        allows: Allows,
        threads: StoreThreads,
    ) -> None:
        self.store = store
        self.runtime = runtime
        self.threads = threads
        self.check = check
        self.allows = allows
        self.feed = RunsFeed()
        self.logs = RunLogs()

    async def page(self, _request: Request) -> Response:
        """The console page, for any of its URLs (public: it holds no data)."""
        return HTMLResponse((STATIC / "viewer.html").read_text("utf-8"))

    async def static(self, request: Request) -> Response:
        """One of the console's files (public: code, no data)."""
        found = static_file(request.path_params["name"])
        if found is None:
            return error_response(404, "route.not-found", "Not Found")
        content, content_type = found
        return Response(content, media_type=content_type, headers={"Cache-Control": "no-cache"})

    async def access(self, request: Request) -> Response:
        """Whether this request's token may read, and may write."""
        self.check(request, False)
        return _json({"reads": True, "writes": self.allows(request, True)})

    async def runs(self, request: Request) -> Response:
        """A page of runs newest first, with counts by status and the log position read at."""
        self.check(request, False)
        query = _parse(RunsQuery, request)
        answer = await self.threads.run(
            newest_runs, self.runtime, query.filters(), query.before, query.limit
        )
        return _json(answer)

    async def overview(self, request: Request) -> Response:
        """Everything the run page shows beside its follow-ups and events."""
        self.check(request, False)
        run_id = request.path_params["run_id"]
        check_arguments(("run_id",), (run_id,), {})
        answer = await self.threads.run(run_overview, self.store, self.runtime, self.logs, run_id)
        return _json(answer)

    async def events(self, request: Request) -> Response:
        """A page of the run's own events, of one wire name if asked."""
        self.check(request, False)
        run_id = request.path_params["run_id"]
        query = _parse(EventsQuery, request)
        check_arguments(("run_id",), (run_id,), {})
        answer = await self.threads.run(
            lambda: run_events(
                self.store,
                run_id,
                after=query.after,
                limit=query.limit,
                wire_name=query.wire_name,
            )
        )
        return _json(answer)

    async def bundle(self, request: Request) -> Response:
        """The run's audit bundle (its lineage's), as ``runledger audit --export`` writes it."""
        self.check(request, False)
        run_id = request.path_params["run_id"]
        check_arguments(("run_id",), (run_id,), {})

        def export() -> bytes:
            with tempfile.TemporaryDirectory(prefix="runledger-bundle-") as folder:
                path = Path(folder) / "bundle.jsonl"
                self.store.export_run(run_id, path, lineage=True)
                return path.read_bytes()

        content = await self.threads.run(export)
        name = re.sub(r"[^A-Za-z0-9._-]", "_", run_id)[:80]
        disposition = f'attachment; filename="{name}.bundle.jsonl"'
        return Response(
            content,
            media_type="application/x-ndjson",
            headers={"Content-Disposition": disposition},
        )

    async def runs_feed(self, request: Request) -> Response:
        """Server-sent ``runs`` events: the list entries of runs whose events were logged
        after ``after``, as their events arrive."""
        self.check(request, False)
        query = _parse(FeedQuery, request)
        return StreamingResponse(
            self._feed(query.after), media_type="text/event-stream", headers=STREAM_HEADERS
        )

    async def _feed(self, after: int) -> AsyncIterator[str]:
        waiter = asyncio.Event()
        self.feed.join(waiter)
        try:
            yield ": open\n\n"
            cursor, quiet = after, 0
            while True:
                events = await self.threads.run(log_after, self.store, cursor)
                if events:
                    cursor = events[-1].position
                    ids = [e.payload.get("run_id") for e in events]
                    changed = list(dict.fromkeys(i for i in ids if isinstance(i, str)))
                    summaries = await self.threads.run(runs_by_id, self.runtime, changed)
                    yield _feed_event(cursor, summaries)
                    if len(events) == LOG_PAGE:
                        continue
                if not await self.feed.wait(waiter):
                    return
                quiet += 1
                if quiet % KEEPALIVE_EVERY == 0:
                    yield ": keepalive\n\n"
        finally:
            self.feed.leave(waiter)

    def routes(self) -> list[Route]:
        """The console's routes (their paths start with none of the API's)."""
        return [
            Route("/console", self.page, methods=["GET"]),
            Route("/console/runs/{run_id:path}", self.page, methods=["GET"]),
            Route("/static/{name}", self.static, methods=["GET"]),
            Route("/console/api/access", self.access, methods=["GET"]),
            Route("/console/api/runs", self.runs, methods=["GET"]),
            Route("/console/api/feed", self.runs_feed, methods=["GET"]),
            Route("/console/api/runs/{run_id}/overview", self.overview, methods=["GET"]),
            Route("/console/api/runs/{run_id}/events", self.events, methods=["GET"]),
            Route("/console/api/runs/{run_id}/bundle", self.bundle, methods=["GET"]),
        ]


__all__: Sequence[str] = ["Console", "RunsFeed", "static_file"]
