"""Any value in any argument of any public command or query: only a WorkflowError escapes,
its message is bounded and printable, and a rejected command writes nothing."""

from __future__ import annotations

import inspect
from typing import Any, Final

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.errors import MAX_SHOWN_CHARACTERS, WorkflowError
from runledger.infrastructure.store import WorkflowStore
from tests.property.strategies import hostile_values
from tests.property.world import GENERAL, SPECIFIC, World, baseline, build_world

NOT_FUZZED: Final = frozenset({"close", "rebuild_projection", "export_run", "prune_runs"})
"""Public names fuzzed apart: ``close`` ends the store, a rebuild replays the whole log
(every example's world), so it gets its own test on a small store, and an export or a prune
writes files wherever its path says (tests/integration/test_audit_bundles.py and
test_prune.py give them hostile arguments in a folder of their own)."""

SURFACE: Final = sorted(
    name for name in dir(WorkflowStore) if not name.startswith("_") and name not in NOT_FUZZED
)
"""The whole public surface, read from the class: a new command is fuzzed as soon as it exists."""

EXAMPLES: Final = {"memory": 25, "sqlite": 25, "postgresql": 3}
"""Examples per backend of the deep search (``-m slow``), in units of the profile's
``max_examples`` (100 under ``ci``): 5,000 across memory and a SQLite file per CI run, 300 on
PostgreSQL."""

QUICK_EXAMPLES: Final = {"memory": 3, "sqlite": 3, "postgresql": 1}
"""The same in the default run: every backend, a tenth of the search. The deep one took about
a minute per backend on a loaded two-core machine, on the default run's critical path; CI
still runs it, in its second step."""


def parameters(method: str) -> list[inspect.Parameter]:
    return list(inspect.signature(getattr(WorkflowStore, method)).parameters.values())[1:]


def backend_of(store_url: str) -> str:
    return store_url.split(":", 1)[0]


def logged_after(store: WorkflowStore, position: int) -> list[Any]:
    return store.event_log(after=position, limit=100_000)


def test_every_argument_of_the_public_surface_has_a_baseline() -> None:
    names = {parameter.name for method in SURFACE for parameter in parameters(method)}
    specific = {name for (method, name) in SPECIFIC if method in SURFACE}

    assert names - set(GENERAL) == set(), "add a baseline to tests/property/world.py"
    assert specific <= names
    assert "create_run" in SURFACE
    assert "viewer_deltas" in SURFACE


@st.composite
def calls(draw: st.DrawFn) -> tuple[str, dict[str, Any]]:
    """A method of the surface and, for each argument, a hostile value or (None) its baseline."""
    method = draw(st.sampled_from(SURFACE))
    arguments: dict[str, Any] = {}
    taken = parameters(method)
    if taken:
        hostile = draw(st.sets(st.sampled_from([p.name for p in taken]), min_size=1))
    else:
        hostile = set()
    for parameter in taken:
        if parameter.name in hostile:
            arguments[parameter.name] = ("hostile", draw(hostile_values, label=parameter.name))
        elif parameter.default is inspect.Parameter.empty or draw(st.booleans()):
            arguments[parameter.name] = ("baseline", None)
    return method, arguments


def call(store: WorkflowStore, world: World, method: str, drawn: dict[str, Any]) -> None:
    arguments = {
        name: value if kind == "hostile" else baseline(store, world, method, name)
        for name, (kind, value) in drawn.items()
    }
    getattr(store, method)(**arguments)


def check_the_surface(store: WorkflowStore, examples: int) -> None:
    """Hostile calls until ``examples`` were drawn: each either works or raises a bounded
    WorkflowError, and a rejected one leaves the log as it was."""
    # A world is reused until a call changes the log: most hostile calls are rejected, and
    # a world costs ten commands.
    current: dict[str, Any] = {"world": None, "position": 0}

    @settings(max_examples=examples)
    @given(calls())
    def check(drawn_call: tuple[str, dict[str, Any]]) -> None:
        method, drawn = drawn_call
        if current["world"] is None:
            current["world"] = build_world(store)
            current["position"] = logged_after(store, current["position"])[-1].position
        try:
            call(store, current["world"], method, drawn)
        except WorkflowError as error:
            message = str(error)
            message.encode("utf-8")
            assert len(message) <= 2 * MAX_SHOWN_CHARACTERS + 200
            assert logged_after(store, current["position"]) == [], f"{method} wrote, then failed"
        else:
            if logged_after(store, current["position"]):
                current["world"] = None

    check()


def test_only_workflow_errors_escape_and_a_rejection_writes_nothing(
    store: WorkflowStore, store_url: str
) -> None:
    check_the_surface(store, settings().max_examples * QUICK_EXAMPLES[backend_of(store_url)])


@pytest.mark.slow
def test_a_deep_search_finds_only_workflow_errors_and_rejections_that_write_nothing(
    store: WorkflowStore, store_url: str
) -> None:
    check_the_surface(store, settings().max_examples * EXAMPLES[backend_of(store_url)])


def test_a_rebuild_with_a_hostile_name_or_progress_is_refused_before_it_drops_anything(
    store: WorkflowStore,
) -> None:
    world = build_world(store)
    queue = store.follow_up_queue(world.run_id)

    @settings(max_examples=settings().max_examples)
    @given(name=hostile_values | st.just("follow_up_queue"), progress=hostile_values)
    def check(name: Any, progress: Any) -> None:
        try:
            store.rebuild_projection(name, progress=progress)
        except WorkflowError:
            assert store.follow_up_queue(world.run_id) == queue

    check()
