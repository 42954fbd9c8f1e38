"""The whole demo with tracing, metrics and JSON logs on: no span, metric label or log line
carries a prompt, an input, an output or the store's password (SQLite and PostgreSQL)."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator
from typing import Any

import pytest
from rich.console import Console

from runledger.infrastructure.cli import demo_story
from runledger.infrastructure.logs import JsonLines
from runledger.infrastructure.runtime import open_runtime
from runledger.infrastructure.storage.urls import redact_url
from runledger.infrastructure.store import WorkflowStore
from tests.support.telemetry import Collected, telemetry

__all__ = ["telemetry"]

PASSWORD = "s3cret-Pa55word"
PAYLOAD_TEXTS = (
    "Also check the migration guide for breaking changes.",
    "Re-run the flaky refund tests before reporting.",
    "Please also deploy to staging.",
    "Translate the review summary into French.",
    "acme/payments-api",
    demo_story.TEST_FAILURE,
    "Approve the review plan?",
)


@pytest.fixture(params=["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def demo_url(request: pytest.FixtureRequest, tmp_path: Any) -> str:
    """A store URL with a password in it (PostgreSQL here trusts, so any password opens)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'demo.db'}?password={PASSWORD}"
    url: str = request.getfixturevalue("postgres_store_url")
    scheme, rest = url.split("://", 1)
    userinfo, host = rest.split("@", 1)
    return f"{scheme}://{userinfo.split(':')[0]}:{PASSWORD}@{host}"


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """Every ``runledger`` log line of the test, as the CLI's ``--log-format json`` writes."""
    lines = io.StringIO()
    handler = logging.StreamHandler(lines)
    handler.setFormatter(JsonLines())
    logger = logging.getLogger("runledger")
    previous = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield lines
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous)


def everything_reported(telemetry: Collected) -> str:
    """Every span's name, attributes, events and status, and every metric point's labels."""
    reported = []
    for span in telemetry.spans():
        reported.append(span.name)
        reported.append(repr(dict(span.attributes or {})))
        reported += [repr(dict(event.attributes or {})) for event in span.events]
        reported.append(repr(span.status.description))
    data = telemetry.reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                reported += [repr(dict(p.attributes or {})) for p in metric.data.data_points]
    return "\n".join(reported)


def test_the_demo_with_tracing_on_reports_no_payload_text_and_no_password(
    demo_url: str, telemetry: Collected, json_log: io.StringIO
) -> None:
    sqlite_path = demo_url.split("?")[0] if demo_url.startswith("sqlite") else None
    url = sqlite_path or demo_url
    output = io.StringIO()
    with open_runtime(url) as runtime:

        def failing_listener() -> None:
            # A listener's fault is logged with its exception: the message must not be.
            raise ValueError(PAYLOAD_TEXTS[0])

        remove = runtime.add_views_listener(failing_listener)
        store = WorkflowStore(runtime)
        with telemetry.tracer.start_as_current_span("host"):
            demo_story.run_demo(store, Console(file=output, width=200), url=redact_url(url))
        remove()
        # A module logging the URL it was given, password and all, as a careless one might.
        logging.getLogger("runledger.test").warning("opened %s", demo_url)

    printed = output.getvalue()
    assert PAYLOAD_TEXTS[0] in printed  # the demo did use the texts searched for below
    reported = everything_reported(telemetry)
    lines = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert len(telemetry.spans()) > 50
    assert "views listener failed" in [line["message"] for line in lines]
    assert all(
        set(line) >= {"time", "level", "logger", "message", "trace_id", "span_id"} for line in lines
    )
    assert any(line["trace_id"] for line in lines)
    logged = json_log.getvalue()
    for text in (*PAYLOAD_TEXTS, PASSWORD):
        assert text not in reported, text
        assert text not in logged, text
