"""Rows measured in turns with their baselines report the median of matched per-turn ratios."""

from __future__ import annotations

import pytest

from runledger.infrastructure.cli.bench.runner import matched_turns


def test_the_ratio_is_the_median_of_the_per_turn_ratios_not_the_ratio_of_means() -> None:
    # The second turn ran on a loaded machine: both sides fell by 4x together.
    value, baselines = matched_turns([100.0, 25.0, 90.0], {"raw": [200.0, 50.0, 100.0]})

    assert value == 90.0
    assert value / baselines["raw"] == pytest.approx(0.5)


def test_each_baseline_kind_is_matched_on_its_own() -> None:
    value, baselines = matched_turns(
        [10.0, 10.0, 10.0], {"ideal": [20.0, 20.0, 40.0], "library": [5.0, 10.0, 5.0]}
    )

    assert value / baselines["ideal"] == pytest.approx(0.5)
    assert value / baselines["library"] == pytest.approx(2.0)


def test_turns_of_unequal_count_are_refused() -> None:
    with pytest.raises(ValueError, match="shorter"):
        matched_turns([1.0, 2.0], {"raw": [1.0]})
