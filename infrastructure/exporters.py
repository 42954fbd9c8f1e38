"""The CLI's OpenTelemetry SDK: OTLP export to a collector, a Prometheus registry to scrape.

Only the ``otel`` extra installs the SDK and exporters, so everything here is imported when
asked for: a plain install runs every command, and asking for an exporter says which extra
to install (``OptionalExtraMissingError``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any, Final

from opentelemetry import metrics, trace

from runledger.domain.errors import InvalidLogFormatError, OptionalExtraMissingError
from runledger.infrastructure.logs import LOG_FORMATS, configure_logging
from runledger.infrastructure.telemetry import TELEMETRY

EXTRA: Final = "otel"
SERVICE_NAME: Final = "runledger"
EXPORT_INTERVAL_MS: Final = 10_000


def optional(module: str, feature: str) -> ModuleType:
    """``module`` imported, or the error naming the extra that installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise OptionalExtraMissingError(
            feature=feature, extra=EXTRA, module=f"no module {error.name or module}"
        ) from None


@dataclass
class Exporters:
    """The providers the CLI reports to, and how to flush them at exit."""

    prometheus: Callable[[], bytes] | None = None
    """Renders the Prometheus text exposition (with ``--metrics``)."""
    content_type: str = "text/plain; version=0.0.4; charset=utf-8"
    _shutdowns: list[Callable[[], Any]] = field(default_factory=list)

    def shutdown(self) -> None:
        """Flush what is buffered and stop exporting."""
        for shutdown in self._shutdowns:
            shutdown()
        self._shutdowns.clear()


def start_exporters(*, otlp_endpoint: str | None, prometheus: bool) -> Exporters:
    """SDK providers exporting spans and metrics by OTLP/HTTP to ``otlp_endpoint`` (e.g.
    ``http://127.0.0.1:4318``), and metrics to a Prometheus registry; set as the process's
    global providers (nothing is started when neither is asked for)."""
    exporters = Exporters()
    if otlp_endpoint is None and not prometheus:
        return exporters
    feature = "--otlp-endpoint" if otlp_endpoint is not None else "--metrics"
    sdk_metrics = optional("opentelemetry.sdk.metrics", feature)
    resources = optional("opentelemetry.sdk.resources", feature)
    resource = resources.Resource.create({"service.name": SERVICE_NAME})
    readers: list[Any] = []
    tracer_provider = None
    if otlp_endpoint is not None:
        base = otlp_endpoint.rstrip("/")
        sdk_trace = optional("opentelemetry.sdk.trace", feature)
        export = optional("opentelemetry.sdk.trace.export", feature)
        otlp_traces = optional("opentelemetry.exporter.otlp.proto.http.trace_exporter", feature)
        otlp_metrics = optional("opentelemetry.exporter.otlp.proto.http.metric_exporter", feature)
        periodic = optional("opentelemetry.sdk.metrics.export", feature)
        tracer_provider = sdk_trace.TracerProvider(resource=resource)
        tracer_provider.add_span_processor(
            export.BatchSpanProcessor(otlp_traces.OTLPSpanExporter(endpoint=f"{base}/v1/traces"))
        )
        readers.append(
            periodic.PeriodicExportingMetricReader(
                otlp_metrics.OTLPMetricExporter(endpoint=f"{base}/v1/metrics"),
                export_interval_millis=EXPORT_INTERVAL_MS,
            )
        )
        trace.set_tracer_provider(tracer_provider)
        exporters._shutdowns.append(tracer_provider.shutdown)
    if prometheus:
        client = optional("prometheus_client", "--metrics")
        exporter = optional("opentelemetry.exporter.prometheus", "--metrics")
        registry = client.CollectorRegistry()
        readers.append(exporter.PrometheusMetricReader(registry=registry))
        exporters.prometheus = lambda: bytes(client.generate_latest(registry))
        exporters.content_type = client.CONTENT_TYPE_LATEST
    meter_provider = sdk_metrics.MeterProvider(resource=resource, metric_readers=readers)
    metrics.set_meter_provider(meter_provider)
    exporters._shutdowns.insert(0, meter_provider.shutdown)
    TELEMETRY.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    return exporters


def start_observability(
    log_format: str, otlp_endpoint: str | None, *, prometheus: bool = False
) -> Exporters:
    """A long-running command's logging and exporters, from its options."""
    if log_format not in LOG_FORMATS:
        raise InvalidLogFormatError(log_format=log_format, allowed=", ".join(LOG_FORMATS))
    configure_logging("json" if log_format == "json" else "text")
    return start_exporters(otlp_endpoint=otlp_endpoint, prometheus=prometheus)


__all__: Sequence[str] = ["Exporters", "optional", "start_exporters", "start_observability"]
