"""How a parallel rebuild spreads projections over its processes, by their own weights."""

from __future__ import annotations

from runledger.infrastructure.runtime import default_projections
from runledger.infrastructure.views.rebuild import split


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
