"""An audit step pauses the cyclic garbage collector and leaves it as it found it."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest

from runledger.infrastructure.collector import collector_paused


@pytest.fixture
def collector_state() -> Iterator[None]:
    enabled = gc.isenabled()
    yield
    if enabled:
        gc.enable()
    else:
        gc.disable()


@pytest.mark.usefixtures("collector_state")
def test_the_collector_is_off_inside_and_on_again_after() -> None:
    gc.enable()
    with collector_paused():
        assert not gc.isenabled()
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_the_collector_is_on_again_after_a_failure() -> None:
    gc.enable()
    with pytest.raises(RuntimeError), collector_paused():
        raise RuntimeError("the step failed")
    assert gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_a_collector_the_host_turned_off_stays_off() -> None:
    gc.disable()
    with collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled()


@pytest.mark.usefixtures("collector_state")
def test_a_rebuild_replays_with_the_collector_paused(monkeypatch: pytest.MonkeyPatch) -> None:
    from runledger.infrastructure.runtime import open_runtime
    from runledger.infrastructure.views import rebuild
    from runledger.infrastructure.views.projector import run_pages

    seen: list[bool] = []

    def watched(*args: object, **kwargs: object) -> int:
        seen.append(gc.isenabled())
        return run_pages(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(rebuild, "run_pages", watched)
    gc.enable()
    with open_runtime("memory://") as runtime:
        runtime.rebuild_blue_green(drop_old=True)

    assert seen
    assert not any(seen)
    assert gc.isenabled()


def test_a_frozen_heap_is_out_of_later_collections() -> None:
    from runledger.infrastructure.collector import freeze_heap

    if gc.get_freeze_count():
        pytest.skip("this worker's heap was frozen by an earlier test")
    alive = [[number] for number in range(10)]

    def walked() -> set[int]:
        """The containers some generation's collection walks."""
        return {id(item) for generation in range(3) for item in gc.get_objects(generation)}

    assert id(alive) in walked()
    freeze_heap()
    try:
        # Alive when frozen: in the permanent generation, which no collection walks.
        assert id(alive) not in walked()
        gc.collect()
        assert id(alive) not in walked()
        made_after = [1, 2]
        assert id(made_after) in walked()
    finally:
        gc.unfreeze()
    assert id(alive) in walked()
