"""V3: the peak RSS of a blue/green rebuild, and next to it over a tenth of the history (the
goal: memory that does not grow with history), on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from runledger.infrastructure.cli.bench import projections
from runledger.infrastructure.cli.bench.runner import Bench
from tests.support.bench import DURABLE, durable_bench


@pytest.fixture(params=DURABLE)
def bench(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Bench]:
    with durable_bench(request, tmp_path_factory, events=600) as opened:
        yield opened


def test_v3_over_a_longer_history_is_measured_next_to_the_shorter_one(
    bench: Bench, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(projections, "HISTORY_EVENTS", 300)

    row = projections.peak_rss(bench.scratch.new_url(), 900, new_baseline_url=bench.scratch.new_url)

    assert row.id == "V3"
    assert row.baseline is not None
    assert row.baseline > 30, "a process's RSS, in MB"
    assert row.ratio == pytest.approx(row.value / row.baseline)
    assert row.met == (row.value <= 500 and row.ratio is not None and row.ratio <= 1.1)
    assert "(900 events), next to 300 events" in row.name
    assert "1.1 x the 300-event figure" in row.goal


def test_v3_at_the_shorter_history_has_no_baseline(bench: Bench) -> None:
    row = projections.peak_rss(bench.scratch.new_url(), 600, new_baseline_url=bench.scratch.new_url)

    assert (row.baseline, row.ratio) == (None, None)
    assert row.met == (row.value <= 500)
    assert row.goal == "<= 500 MB"
