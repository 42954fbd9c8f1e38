"""The serve benchmark rows run against the real command and have the bench runner's row shape."""

from __future__ import annotations

from pathlib import Path

import pytest

from runledger.infrastructure.cli.bench.runner import BenchResult
from runledger.infrastructure.cli.bench.serve import command_to_sse_delta, http_queue_follow_up


@pytest.mark.slow
def test_the_serve_rows_measure_http_commands_and_sse_deltas(tmp_path: Path) -> None:
    http = http_queue_follow_up(f"sqlite:///{tmp_path / 's1.db'}", 0.2)
    delta = command_to_sse_delta(f"sqlite:///{tmp_path / 's2.db'}", 5)

    assert isinstance(http, BenchResult)
    assert isinstance(delta, BenchResult)
    assert (http.id, http.unit, delta.id, delta.unit) == ("S1", "requests/s", "S2", "ms p99")
    assert http.value > 0
    assert (http.baseline or 0) > 0
    assert delta.value > 0
    assert set(http.as_json()) == set(delta.as_json())
