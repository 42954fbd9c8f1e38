"""Bench row O1: what instrumentation costs P1 (``queue_follow_up``, one writer).

Three modes take turns on one store, in a rotating order so neither the store's growth nor a
change in the machine's load favours one: telemetry ``disabled`` (no span, no measurement:
the uninstrumented baseline), the ``api`` alone (no SDK: what every host without one pays),
and the ``sdk`` with an in-memory span exporter and metric reader (a host that collects).

Instrumentation is CPU work on the committing thread, while a command's wall time is mostly
the commit's flush, which varies far more from turn to turn than 2 % on a shared disk. So the
goal is judged on the slowdown the extra CPU time makes: (CPU per command in the mode - CPU
per command disabled) / wall time per command disabled. The rates' ratios are shown too.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final

from runledger.infrastructure.cli.bench import Bench, BenchResult
from runledger.infrastructure.store import open_store
from runledger.infrastructure.telemetry import TELEMETRY

TURNS: Final = 10
"""Turns of each mode: more, shorter turns average out the machine's load better."""
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


def _timed(
    command: Callable[[int], object], seconds: float, first: int
) -> tuple[float, float, int]:
    """Wall and CPU seconds of this thread running ``command`` for ``seconds``, and runs."""
    count = 0
    started, cpu = time.perf_counter(), time.thread_time()
    while time.perf_counter() - started < seconds:
        command(first + count)
        count += 1
    return time.perf_counter() - started, time.thread_time() - cpu, count


def instrumentation_cost(bench: Bench) -> BenchResult:
    """O1: P1's rate with the API only, next to telemetry disabled and to the SDK."""
    sdk = _sdk()
    modes: tuple[str, ...] = ("disabled", "api", "sdk") if sdk is not None else ("disabled", "api")
    providers, clear = sdk if sdk is not None else (None, lambda: None)
    seconds = bench.seconds / TURNS
    walls = dict.fromkeys(modes, 0.0)
    spent = dict.fromkeys(modes, 0.0)
    counts = dict.fromkeys(modes, 0)
    with open_store(bench.scratch.new_url()) as store:
        queue = bench.queueing(store, "o1")
        queued = 0
        for turn in range(TURNS):
            for mode in modes[turn % len(modes) :] + modes[: turn % len(modes)]:
                with _mode(mode, providers):
                    wall, used, count = _timed(queue, seconds, queued)
                walls[mode] += wall
                spent[mode] += used
                counts[mode] += count
                queued += count
                clear()
    rates = {mode: counts[mode] / walls[mode] for mode in modes}
    cpu = {mode: spent[mode] / max(1, counts[mode]) for mode in modes}
    wall_disabled = 1 / rates["disabled"]
    slowdown = {mode: (cpu[mode] - cpu["disabled"]) / wall_disabled for mode in modes}
    api_ratio = 1 / (1 + slowdown["api"])
    sdk_ratio = 1 / (1 + slowdown["sdk"]) if "sdk" in slowdown else None
    shown = (
        "no SDK installed"
        if sdk_ratio is None
        else f"SDK {sdk_ratio:.3f} x, {1e6 * (cpu['sdk'] - cpu['disabled']):+.0f} us CPU"
    )
    return BenchResult(
        "O1",
        f"P1 with the OpenTelemetry API, no SDK: {api_ratio:.3f} x disabled by CPU time, "
        f"{1e6 * (cpu['api'] - cpu['disabled']):+.1f} us CPU a command ({shown})",
        rates["api"],
        "commands/s",
        rates["disabled"],
        api_ratio,
        f"API >= {API_GOAL} x, SDK >= {SDK_GOAL} x disabled (by CPU time)",
        api_ratio >= API_GOAL and (sdk_ratio is None or sdk_ratio >= SDK_GOAL),
        {mode: rate for mode, rate in rates.items() if mode != "api"},
    )


__all__: Sequence[str] = ["instrumentation_cost"]
