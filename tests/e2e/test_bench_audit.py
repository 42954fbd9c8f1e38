"""The audit benchmark rows, on a small store: they measure a run that verifies."""

from __future__ import annotations

from pathlib import Path

from runledger.infrastructure.cli.bench.audit import audit_bench


def test_the_audit_bench_gives_rows_a1_and_a2_shaped_like_the_bench(tmp_path: Path) -> None:
    rows = audit_bench(f"sqlite:///{tmp_path / 'unused.db'}", events=600, follow_ups=40)

    assert [row.id for row in rows] == ["A1", "A2"]
    for row in rows:
        assert row.unit == "s"
        assert row.value > 0
        assert row.seconds is None  # set by ``Bench.run``, which measured nothing here
        assert row.baseline is not None
        assert row.baseline > 0
        assert set(row.as_json()) == {
            "id",
            "name",
            "value",
            "unit",
            "baseline",
            "ratio",
            "goal",
            "met",
            "baselines",
            "ratios",
            "seconds",
        }
