"""Bench row O1: what instrumentation costs P1 (``queue_follow_up``, one writer).

Three modes take turns on one store, in a rotating order so neither the store's growth nor a
change in the machine's load favours one: telemetry ``disabled`` (no span, no measurement:
the uninstrumented baseline), the ``api`` alone (no SDK: what every host without one pays),
and the ``sdk`` with an in-memory span exporter and metric reader (a host that collects).

A command's wall time is mostly its commit's flush, which on a shared disk varies from turn
to turn by far more than 2 %, so the rates' ratios alone cannot tell 2 % apart. The goal is
judged on the instrumentation's own time instead: every telemetry call one P1 command makes
(its call span and metrics, the commit span, the appended events, the group size, the
read-model span), timed in a tight loop in each mode (best of several rounds), as a share of
P1's wall time per command measured alongside. Both are reported.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from uuid import uuid4

from eventsourcing.persistence import StoredEvent

from runledger.infrastructure.cli.bench import Bench, BenchResult
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.telemetry import (
    COMMAND_SPAN,
    READ_MODELS_SPAN,
    SAME_COMMIT,
    TELEMETRY,
)

TURNS: Final = 6
"""Turns of each mode: more, shorter turns average out the machine's load better."""
ROUNDS: Final = 5
LOOPS: Final = 2_000
API_GOAL: Final = 0.98
SDK_GOAL: Final = 0.90


def _sdk() -> tuple[Any, Callable[[], None]] | None:
    """In-memory SDK providers and how to empty them, or None without the SDK installed."""
    try:
        sdk_trace = importlib.import_module("opentelemetry.sdk.trace")
        export = importlib.import_module("opentelemetry.sdk.trace.export")
        in_memory = importlib.import_module(
            "opentelemetry.sdk.trace.export.in_memory_span_exporter"
        )
        sdk_metrics = importlib.import_module("opentelemetry.sdk.metrics")
        metrics_export = importlib.import_module("opentelemetry.sdk.metrics.export")
    except ImportError:
        return None
    exporter = in_memory.InMemorySpanExporter()
    tracer_provider = sdk_trace.TracerProvider()
    tracer_provider.add_span_processor(export.SimpleSpanProcessor(exporter))
    reader = metrics_export.InMemoryMetricReader()
    meter_provider = sdk_metrics.MeterProvider(metric_readers=[reader])
    return (tracer_provider, meter_provider), exporter.clear


@contextmanager
def _mode(mode: str, providers: Any) -> Iterator[None]:
    if mode == "disabled":
        TELEMETRY.enabled = False
    elif mode == "sdk":
        TELEMETRY.configure(*providers)
    try:
        yield
    finally:
        TELEMETRY.enabled = True
        TELEMETRY.configure()


def _timed(command: Callable[[int], object], seconds: float, first: int) -> tuple[float, int]:
    """Wall seconds of running ``command`` for ``seconds``, and how many runs."""
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        command(first + count)
        count += 1
    return time.perf_counter() - started, count


def _per_command_seconds(runtime: StoreRuntime, mode: str, providers: Any) -> float:
    """The telemetry work of one P1 command, alone, in ``mode`` (best of ``ROUNDS``)."""
    stored = [
        StoredEvent(uuid4(), 1, topic, b"{}")
        for topic in ("follow-up.queued", "workflow-message.created")
    ]

    def save() -> None:
        with TELEMETRY.commit():
            TELEMETRY.grouped(1)
            TELEMETRY.committed(stored, 1)
        with TELEMETRY.span(READ_MODELS_SPAN, **{SAME_COMMIT: True}):
            pass

    def command() -> None:
        TELEMETRY.call(COMMAND_SPAN, "queue_follow_up", runtime, "run-1", save)

    best = float("inf")
    with _mode(mode, providers):
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(LOOPS):
                command()
            best = min(best, (time.perf_counter() - started) / LOOPS)
    return best


def instrumentation_cost(bench: Bench) -> BenchResult:
    """O1: P1's rate with the API only, next to telemetry disabled and to the SDK."""
    sdk = _sdk()
    modes: tuple[str, ...] = ("disabled", "api", "sdk") if sdk is not None else ("disabled", "api")
    providers, clear = sdk if sdk is not None else (None, lambda: None)
    seconds = bench.seconds / TURNS
    walls = dict.fromkeys(modes, 0.0)
    counts = dict.fromkeys(modes, 0)
    with open_runtime(bench.scratch.new_url()) as runtime:
        queue = bench.queueing(WorkflowStore(runtime), "o1")
        queued = 0
        for turn in range(TURNS):
            for mode in modes[turn % len(modes) :] + modes[: turn % len(modes)]:
                with _mode(mode, providers):
                    wall, count = _timed(queue, seconds, queued)
                walls[mode] += wall
                counts[mode] += count
                queued += count
                clear()
        own = {mode: _per_command_seconds(runtime, mode, providers) for mode in modes}
        clear()
    rates = {mode: counts[mode] / walls[mode] for mode in modes}
    command_seconds = 1 / rates["disabled"]
    # Against no instrumentation at all: the disabled path's own few calls count as cost too.
    ratios = {mode: command_seconds / (command_seconds + own[mode]) for mode in modes}
    sdk_ratio = ratios.get("sdk")
    shown = (
        "no SDK installed"
        if sdk_ratio is None
        else f"SDK {sdk_ratio:.3f} x ({1e6 * own['sdk']:.0f} us)"
    )
    return BenchResult(
        "O1",
        f"P1 with the OpenTelemetry API, no SDK: {ratios['api']:.4f} x uninstrumented "
        f"({1e6 * own['api']:.1f} us of {1e6 * command_seconds:.0f} us a command); {shown}",
        rates["api"],
        "commands/s",
        rates["disabled"],
        ratios["api"],
        f"API >= {API_GOAL} x, SDK >= {SDK_GOAL} x uninstrumented",
        ratios["api"] >= API_GOAL and (sdk_ratio is None or sdk_ratio >= SDK_GOAL),
        {mode: rate for mode, rate in rates.items() if mode != "api"},
    )


__all__: Sequence[str] = ["instrumentation_cost"]
