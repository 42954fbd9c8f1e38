"""The CLI's observability options, each in a subprocess: JSON log lines from a worker,
the one-line error naming the ``otel`` extra when the SDK is missing, and every other command
working without it (as after a plain ``pip install .``)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from runledger.domain.values import Actor
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.store import WorkflowStore

PROMPT = "Summarise the incident for the on-call channel."
WITHOUT_SDK = (
    # What a plain install lacks: importing any of these fails as if never installed.
    "import sys\n"
    "for name in ('opentelemetry.sdk', 'opentelemetry.exporter', 'prometheus_client'):\n"
    "    sys.modules[name] = None\n"
    "from runledger.infrastructure.cli.app import main\n"
    "sys.argv = ['runledger', *sys.argv[1:]]\n"
    "main()\n"
)


def environment() -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env["COLUMNS"] = "200"
    return env


def without_sdk(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_SDK, *args],
        cwd=cwd,
        env=environment(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_metrics_without_the_otel_extra_fail_in_one_line_naming_the_extra(
    tmp_path: Path,
) -> None:
    completed = without_sdk("serve", "--url", "memory://", "--metrics", "--port", "0", cwd=tmp_path)

    assert completed.returncode == 2, completed.stderr
    assert completed.stderr.strip() == (
        "error [cli.extra-missing]: --metrics needs the otel extra: "
        "pip install 'runledger[otel]' (no module opentelemetry.sdk.metrics)"
    )


def test_an_otlp_endpoint_without_the_otel_extra_fails_naming_the_extra(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    completed = without_sdk(
        "projections", "run", "--url", url, "--otlp-endpoint", "http://127.0.0.1:9", cwd=tmp_path
    )

    assert completed.returncode == 2, completed.stderr
    assert "[cli.extra-missing]: --otlp-endpoint needs the otel extra" in completed.stderr
    assert "Traceback" not in completed.stderr


def test_the_demo_runs_without_the_otel_extra(tmp_path: Path) -> None:
    completed = without_sdk("demo", "--url", "memory://", cwd=tmp_path)

    assert completed.returncode == 0, completed.stderr
    assert "Event log of" in completed.stdout


def test_an_unknown_log_format_is_refused_in_one_line(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    completed = without_sdk("projections", "run", "--url", url, "--log-format", "xml", cwd=tmp_path)

    assert completed.returncode == 2
    assert completed.stderr.strip() == (
        "error [cli.invalid-log-format]: Unknown log format 'xml': use one of text, json"
    )


def test_a_worker_with_json_logs_writes_one_object_a_line_without_payload_text(
    tmp_path: Path,
) -> None:
    url = f"sqlite:///{tmp_path / 'store.db'}"
    with open_runtime(url, embedded_projections=False) as runtime:
        store = WorkflowStore(runtime)
        store.create_run("run-1", workflow_name="echo", input={"secret": PROMPT})
        store.bind_origin_session("run-1", "session-1")
        store.record_progress("run-1", status="running")
        store.queue_follow_up(
            "run-1",
            request_id="r-1",
            target_session_id="session-1",
            actor=Actor(type="session", id="session-1"),
            source="cli-test",
            prompt=PROMPT,
        )
        head = runtime.storage.max_position()
    command = ["projections", "run", "--url", url, "--poll", "0.1", "--log-format", "json"]
    worker = subprocess.Popen(
        [sys.executable, "-m", "runledger.infrastructure.cli", *command],
        cwd=tmp_path,
        env=environment(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        with open_runtime(url, embedded_projections=False) as watcher:
            while any(status.lag for status in watcher.projection_status()):
                assert time.monotonic() < deadline, "the worker did not catch up"
                time.sleep(0.1)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=60)

    lines = [json.loads(line) for line in stderr.splitlines()]
    assert [line["message"] for line in lines] == [f"projected {head} events"]
    [line] = lines
    assert set(line) == {"time", "level", "logger", "message", "trace_id", "span_id"}
    assert line["logger"] == "runledger.infrastructure.views.worker"
    assert line["level"] == "INFO"
    assert PROMPT not in stderr
