"""What operators and Kubernetes ask a server: ``/healthz``, ``/readyz``, ``/metrics``; and
the span of each request, continuing the caller's W3C ``traceparent``.

``/healthz`` answers 200 while the process serves. ``/readyz`` answers 200 once the store
answers, no read model is stalled and none is more than ``READY_MAX_LAG_SECONDS`` behind;
503 otherwise, with the reasons (names and numbers only). Probes need no token (kubelets
send none) and tell nothing about runs. ``/metrics`` (``serve --metrics``) is the Prometheus
text exposition, behind the token unless ``--public-metrics``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Final

from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route as StarletteRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from runledger.domain.errors import WorkflowError
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.serve.auth import Access
from runledger.infrastructure.serve.errors import error_response
from runledger.infrastructure.telemetry import STORE, TELEMETRY

READY_MAX_LAG_SECONDS: Final = 30.0
"""A read model whose oldest unprojected event is older than this makes the server unready:
its answers would be that stale (a worker stopped, or far behind)."""

PROBE_PATHS: Final = frozenset({"/healthz", "/readyz", "/metrics"})
"""Asked every few seconds: no span of their own."""

SSE_CLIENTS: Final = "runledger.serve.sse.clients"
_PROPAGATOR: Final = TraceContextTextMapPropagator()


@dataclass(frozen=True)
class MetricsEndpoint:
    """``/metrics``: how to render the exposition, and whether it needs no token."""

    render: Callable[[], bytes]
    content_type: str
    public: bool = False


class Probes:
    """The handlers of the probe routes of one server."""

    def __init__(
        self,
        runtime: StoreRuntime,
        access: Access,
        metrics: MetricsEndpoint | None,
        clients: Callable[[], int],
    ) -> None:
        self.runtime = runtime
        self.access = access
        self.metrics = metrics
        self._clients = clients
        TELEMETRY.watch(self)

    def observe(self) -> Iterator[tuple[str, float, dict[str, Any]]]:
        """The server's gauge reading: its open viewer streams."""
        yield SSE_CLIENTS, self._clients(), {STORE: self.runtime.metrics_label}

    async def healthz(self, _request: Request) -> Response:
        """200 while the process serves."""
        return PlainTextResponse("ok\n")

    async def readyz(self, _request: Request) -> Response:
        """200 when the store answers and its read models are current enough, else 503."""
        reasons = await run_in_threadpool(self.not_ready)
        if reasons:
            return JSONResponse({"status": "unavailable", "reasons": reasons}, status_code=503)
        return JSONResponse({"status": "ok"})

    def not_ready(self) -> list[str]:
        """Why the server should get no traffic now (empty: it is ready)."""
        try:
            lags = self.runtime.projection_lags()
        except WorkflowError as error:
            return [f"store does not answer: {error.code}"]
        except Exception as error:
            return [f"store does not answer: {type(error).__name__}"]
        reasons = [f"read model {lag.name} is stalled" for lag in lags if lag.stalled]
        reasons += [
            f"read model {lag.name} is {lag.seconds:.0f}s behind "
            f"(ready under {READY_MAX_LAG_SECONDS:g}s)"
            for lag in lags
            if lag.seconds > READY_MAX_LAG_SECONDS
        ]
        return reasons

    async def scrape(self, request: Request) -> Response:
        """The Prometheus exposition of every runledger metric of this process."""
        metrics = self.metrics
        if metrics is None:  # routed only with metrics
            return error_response(404, "route.not-found", "Not Found")
        # The token as for writes: metrics name stores and read models.
        if not metrics.public and not self.access.allows(request, writes=True):
            response = error_response(401, "auth.required", "A valid bearer token is required")
            response.headers["WWW-Authenticate"] = "Bearer"
            return response
        body = await run_in_threadpool(metrics.render)
        return Response(body, media_type=metrics.content_type)

    def routes(self) -> list[StarletteRoute]:
        """``/healthz``, ``/readyz``, and ``/metrics`` when the server has metrics."""
        routes = [
            StarletteRoute("/healthz", self.healthz, methods=["GET"]),
            StarletteRoute("/readyz", self.readyz, methods=["GET"]),
        ]
        if self.metrics is not None:
            routes.append(StarletteRoute("/metrics", self.scrape, methods=["GET"]))
        return routes


class TracedRequests:
    """ASGI middleware: a server span per request, the child of the request's W3C
    ``traceparent`` when it has one; the store call it makes is that span's child."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        tracer = TELEMETRY.tracer()
        if tracer is None or scope["type"] != "http" or scope["path"] in PROBE_PATHS:
            await self.app(scope, receive, send)
            return
        carrier = {
            name.decode("latin-1"): value.decode("latin-1")
            for name, value in scope["headers"]
            if name in (b"traceparent", b"tracestate")
        }
        method = scope["method"]
        with tracer.start_as_current_span(
            f"HTTP {method}",
            context=_PROPAGATOR.extract(carrier),
            kind=SpanKind.SERVER,
            attributes={"http.request.method": method},
            record_exception=False,
        ) as span:

            async def sent(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                await send(message)

            try:
                await self.app(scope, receive, sent)
            finally:
                # The route's template, never the path: paths hold ids of sessions and runs.
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    span.set_attribute("http.route", route)
                    span.update_name(f"{method} {route}")


__all__: Sequence[str] = ["READY_MAX_LAG_SECONDS", "MetricsEndpoint", "Probes", "TracedRequests"]
