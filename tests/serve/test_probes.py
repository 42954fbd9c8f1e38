"""``/healthz``, ``/readyz``, ``/metrics`` and request spans of a real server, on each backend."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import timedelta

import pytest
from opentelemetry.exporter.prometheus import PrometheusMetricReader
from opentelemetry.sdk.metrics import MeterProvider
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.serve.auth import Access
from runledger.infrastructure.serve.probes import READY_MAX_LAG_SECONDS, MetricsEndpoint
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.telemetry import COMMAND_SPAN, TELEMETRY
from tests.serve.conftest import TOKEN, Served, SharedHost
from tests.support.clock import FakeClock
from tests.support.telemetry import Collected, children_of, telemetry

__all__ = ["telemetry"]

TRACE_ID = "0af7651916cd43dd8448eb211c80319c"
PARENT_ID = "b7ad6b7169203331"


def created(served: Served, run_id: str = "run-1") -> None:
    served.api.ok("create_run", workflow_name="echo", input={}, run_id=run_id)


def test_healthz_answers_200_without_a_token(served: Served) -> None:
    response = served.anonymous.get("/healthz")

    assert response.status_code == 200
    assert response.text == "ok\n"


def test_readyz_answers_200_when_the_store_answers_and_the_read_models_are_current(
    served: Served,
) -> None:
    created(served)

    response = served.anonymous.get("/readyz")

    assert response.status_code == 200
    assert response.json() == {"status": "ok"}


def test_readyz_answers_503_naming_a_stalled_read_model(
    served: Served, monkeypatch: pytest.MonkeyPatch
) -> None:
    projection = served.runtime.projector.runner("runs").projection

    def broken(*_: object) -> None:
        raise RuntimeError("projection bug under test")

    monkeypatch.setattr(projection, "apply", broken)
    created(served)

    response = served.anonymous.get("/readyz")

    assert response.status_code == 503
    assert response.json() == {
        "status": "unavailable",
        "reasons": ["read model runs is stalled"],
    }


def test_readyz_answers_503_while_a_worker_is_far_behind(
    shared_host: SharedHost, durable_serve_url: str
) -> None:
    clock = FakeClock()
    with (
        open_runtime(durable_serve_url, clock=clock, embedded_projections=False) as runtime,
        shared_host.mounted(runtime, Access(TOKEN)),
    ):
        WorkflowStore(runtime).create_run("run-1", workflow_name="echo", input={})
        assert shared_host.anonymous.get("/readyz").status_code == 200
        clock.advance(timedelta(seconds=READY_MAX_LAG_SECONDS + 5))

        behind = shared_host.anonymous.get("/readyz")
        runtime.projector.catch_up()
        caught_up = shared_host.anonymous.get("/readyz")

    assert behind.status_code == 503
    assert all("s behind" in reason for reason in behind.json()["reasons"])
    assert caught_up.status_code == 200


@pytest.fixture
def prometheus() -> Iterator[CollectorRegistry]:
    """runledger's metrics in a Prometheus registry of their own, for the test."""
    registry = CollectorRegistry()
    provider = MeterProvider(metric_readers=[PrometheusMetricReader(registry=registry)])
    TELEMETRY.configure(meter_provider=provider)
    try:
        yield registry
    finally:
        TELEMETRY.configure()
        provider.shutdown()


def metrics_endpoint(registry: CollectorRegistry, *, public: bool = False) -> MetricsEndpoint:
    return MetricsEndpoint(lambda: generate_latest(registry), CONTENT_TYPE_LATEST, public)


def test_metrics_are_served_as_prometheus_text_behind_the_token(
    shared_host: SharedHost, serve_url: str, prometheus: CollectorRegistry
) -> None:
    with (
        open_runtime(serve_url) as runtime,
        shared_host.mounted(runtime, Access(TOKEN), metrics=metrics_endpoint(prometheus)),
    ):
        shared_host.client.post(
            "/runs", json={"run_id": "run-1", "workflow_name": "echo", "input": {}}
        ).raise_for_status()
        anonymous = shared_host.anonymous.get("/metrics")
        scraped = shared_host.client.get("/metrics")
        label = runtime.metrics_label

    assert anonymous.status_code == 401
    assert scraped.status_code == 200
    families = {f.name: f for f in text_string_to_metric_families(scraped.text)}
    [created_runs] = [
        sample
        for sample in families["runledger_commands"].samples
        if sample.name == "runledger_commands_total"
        and sample.labels["runledger_name"] == "create_run"
    ]
    assert created_runs.labels["runledger_outcome"] == "ok"
    assert created_runs.value == 1
    lags = {
        s.labels["runledger_projection"]: s.value
        for s in families["runledger_projection_lag_events"].samples
        if s.labels["runledger_store"] == label
    }
    assert set(lags.values()) == {0}
    assert "runs" in lags
    assert "runledger_command_duration_seconds" in families
    assert "runledger_serve_sse_clients" in families


def test_public_metrics_need_no_token(
    served_memory: Served, shared_host: SharedHost, prometheus: CollectorRegistry
) -> None:
    with shared_host.mounted(
        served_memory.runtime, Access(TOKEN), metrics=metrics_endpoint(prometheus, public=True)
    ):
        response = shared_host.anonymous.get("/metrics")

    assert response.status_code == 200
    assert "runledger_projection_lag_events" in response.text


def test_without_metrics_there_is_no_metrics_route(served_memory: Served) -> None:
    assert served_memory.api.client.get("/metrics").status_code == 404


def test_a_request_with_traceparent_continues_that_trace_into_the_command(
    served: Served, telemetry: Collected
) -> None:
    response = served.api.client.post(
        "/runs",
        json={"run_id": "run-1", "workflow_name": "echo", "input": {}},
        headers={"traceparent": f"00-{TRACE_ID}-{PARENT_ID}-01"},
    )
    assert response.status_code == 201, response.text

    [request] = telemetry.ended("POST /runs")
    assert request.parent is not None
    assert request.parent.is_remote
    assert format(request.parent.span_id, "016x") == PARENT_ID
    assert format(request.context.trace_id, "032x") == TRACE_ID
    assert (request.attributes or {})["http.response.status_code"] == 201
    [command] = children_of(request, telemetry.spans(COMMAND_SPAN))
    assert format(command.context.trace_id, "032x") == TRACE_ID


def test_the_sse_clients_gauge_counts_open_viewer_streams(
    served_memory: Served, telemetry: Collected
):
    created(served_memory)
    label = served_memory.runtime.metrics_label

    def clients() -> list[float]:
        return [
            point.value
            for attributes, point in telemetry.points("runledger.serve.sse.clients")
            if attributes["runledger.store"] == label
        ]

    assert clients() == [0]
    with served_memory.api.client.stream("GET", "/runs/run-1/viewer") as stream:
        # Held while the test reads the gauge: an iterator dropped at once closes the response,
        # and with it the stream, before the server counts it.
        lines = stream.iter_lines()
        next(lines)
        # The stream joins its run's channel right after its first line.
        deadline = time.monotonic() + 10
        while clients() != [1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert clients() == [1]
