"""Telemetry collected in memory: the SDK's span exporter and metric reader, as a host has."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from runledger.infrastructure.telemetry import TELEMETRY


class Collected:
    """Every span and metric runledger reported while this was installed."""

    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.reader = InMemoryMetricReader()
        self.meter_provider = MeterProvider(metric_readers=[self.reader])
        self.tracer = self.tracer_provider.get_tracer("host")

    def spans(self, name: str | None = None) -> list[ReadableSpan]:
        """Ended spans (of ``name``), in the order they ended."""
        spans = self.exporter.get_finished_spans()
        return [span for span in spans if name is None or span.name == name]

    def ended(self, name: str, count: int = 1, timeout: float = 10.0) -> list[ReadableSpan]:
        """The ended spans named ``name``, once there are ``count`` of them.

        A server's request span ends after the last byte of its response is sent, so a client
        can hold the response before the span has ended: this waits for it."""
        deadline = time.monotonic() + timeout
        while len(found := self.spans(name)) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return found

    def points(self, metric: str) -> list[tuple[dict[str, Any], Any]]:
        """``(attributes, point)`` of each data point of ``metric`` now (gauges read now)."""
        data = self.reader.get_metrics_data()
        found = []
        for resource in data.resource_metrics if data is not None else ():
            for scope in resource.scope_metrics:
                for each in scope.metrics:
                    if each.name == metric:
                        found += [(dict(p.attributes or {}), p) for p in each.data.data_points]
        return found

    def close(self) -> None:
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def children_of(parent: ReadableSpan, spans: list[ReadableSpan]) -> list[ReadableSpan]:
    """The spans whose parent is ``parent``."""
    assert parent.context is not None
    return [s for s in spans if s.parent is not None and s.parent.span_id == parent.context.span_id]


@pytest.fixture
def telemetry() -> Iterator[Collected]:
    """runledger reporting to in-memory SDK providers for the test, then to the global ones."""
    collected = Collected()
    TELEMETRY.configure(collected.tracer_provider, collected.meter_provider)
    try:
        yield collected
    finally:
        TELEMETRY.configure()
        collected.close()
