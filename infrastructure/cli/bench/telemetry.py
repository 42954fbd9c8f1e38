"""Bench row O1: what instrumentation costs P1 (``queue_follow_up``, one writer).

Three modes take turns on one store, in a rotating order so neither the store's growth nor a
change in the machine's load favours one: telemetry ``disabled`` (no span, no measurement:
the uninstrumented baseline), the ``api`` alone (no SDK: what every host without one pays),
and the ``sdk`` with an in-memory span exporter and metric reader (a host that collects).

A command's wall time is mostly its commit's flush, which on a shared disk varies from turn
to turn by far more than 2 %, so the rates' ratios alone cannot tell 2 % apart. The goal is
judged on the instrumentation's own time instead: every telemetry call one P1 command makes
(its call span and metrics, the commit span with its read models written in it, the
appended events, the group size), timed in a tight loop in each mode (best of several
rounds), as a share of P1's wall time per command measured alongside. Both are reported.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Final
from uuid import uuid4

from eventsourcing.persistence import StoredEvent

from runledger.infrastructure.cli.bench.runner import Bench, BenchResult
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from runledger.infrastructure.telemetry import (
    COMMAND_SPAN,
    SAME_COMMIT,
    TELEMETRY,
)

TURNS: Final = 6
"""Turns of each mode: more, shorter turns average out the machine's load better."""
ROUNDS: Final = 5
LOOPS: Final = 2_000
QUICK_LOOPS: Final = 100
API_GOAL: Final = 0.02
"""At most this share of a command's time (P1 at most 2 % slower)."""
SDK_GOAL: Final = 0.10


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


def _per_command_seconds(runtime: StoreRuntime, mode: str, providers: Any, loops: int) -> float:
    """The telemetry work of one P1 command, alone, in ``mode`` (best of ``ROUNDS``)."""
    stored = [
        StoredEvent(uuid4(), 1, topic, b"{}")
        for topic in ("follow-up.queued", "workflow-message.created")
    ]

    def save() -> None:
        with TELEMETRY.commit():
            TELEMETRY.grouped(1)
            TELEMETRY.committed(stored, 1)
            TELEMETRY.note(SAME_COMMIT, True)

    def command() -> None:
        TELEMETRY.call(COMMAND_SPAN, "queue_follow_up", runtime, "run-1", save)

    best = float("inf")
    with _mode(mode, providers):
        for _ in range(ROUNDS):
            started = time.perf_counter()
            for _ in range(loops):
                command()
            best = min(best, (time.perf_counter() - started) / loops)
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
        loops = QUICK_LOOPS if bench.quick else LOOPS
        own = {mode: _per_command_seconds(runtime, mode, providers, loops) for mode in modes}
        clear()
    rates = {mode: counts[mode] / walls[mode] for mode in modes}
    command_us = 1e6 / rates["disabled"]
    # Against no instrumentation at all: the disabled path's own few calls count as cost too.
    share = {mode: 1e6 * own[mode] / command_us for mode in modes}
    with_sdk = (
        "no SDK installed"
        if "sdk" not in share
        else f"SDK {1e6 * own['sdk']:.0f} us = {share['sdk']:.2%}"
    )
    shown = ", ".join(f"{mode} {rate:.0f}/s" for mode, rate in rates.items())
    return BenchResult(
        "O1",
        f"instrumentation time of a P1 command with the OpenTelemetry API and no SDK, "
        f"vs P1's own; {with_sdk} (in-memory exporter); P1 rates {shown}",
        1e6 * own["api"],
        "us a command",
        command_us,
        share["api"],
        f"API <= {API_GOAL:.0%}, SDK <= {SDK_GOAL:.0%} of a command",
        share["api"] <= API_GOAL and share.get("sdk", 0.0) <= SDK_GOAL,
        {"P1 command": command_us},
    )


__all__: Sequence[str] = ["instrumentation_cost"]
