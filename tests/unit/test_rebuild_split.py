"""How many processes a parallel rebuild takes, and how it spreads projections over them by
their own weights."""

from __future__ import annotations

import os

import pytest

from runledger.infrastructure.runtime import default_projections
from runledger.infrastructure.views.rebuild import default_processes, split


def test_the_heaviest_projection_gets_a_process_of_its_own_when_it_outweighs_the_rest() -> None:
    projections = default_projections()
    heaviest = max(projections, key=lambda projection: projection.rebuild_weight)

    groups = split(projections, len(projections))

    assert [heaviest.name] in groups
    assert sorted(name for group in groups for name in group) == sorted(
        projection.name for projection in projections
    )


def test_two_processes_share_the_weight_as_evenly_as_heaviest_first_allows() -> None:
    projections = {projection.name: projection for projection in default_projections()}

    groups = split(list(projections.values()), 2)

    loads = [sum(projections[name].rebuild_weight for name in group) for group in groups]
    assert len(groups) == 2
    assert max(loads) - min(loads) <= max(p.rebuild_weight for p in projections.values())


@pytest.mark.parametrize(("cores", "processes"), [(1, 1), (2, 1), (3, 1), (4, 2), (16, 8)])
def test_a_rebuild_takes_half_the_cores_it_may_run_on_and_at_least_one(
    cores: int, processes: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(os, "sched_getaffinity", lambda _: set(range(cores)), raising=False)

    assert default_processes() == processes


def test_without_an_affinity_mask_the_count_of_cores_decides(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 6)

    assert default_processes() == 3
