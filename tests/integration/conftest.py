"""The ``store`` fixture: one WorkflowStore per test on memory, a SQLite file and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.support.clock import FakeClock

BACKENDS = [
    pytest.param("memory", id="memory"),
    pytest.param("sqlite", id="sqlite"),
    pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
]
POOLED = pytest.param(
    "pgbouncer",
    id="pgbouncer",
    marks=[pytest.mark.postgres, pytest.mark.pgbouncer, pytest.mark.slow],
)
"""PostgreSQL through a real PgBouncer in transaction mode (``pooler=transaction``): in the
slow run, beside the pooler's own tests (the scenarios' fourth leg was an eighth of the
default run's PostgreSQL time)."""
POOLED_MODULES = "test_scenarios_"
"""The scenario suites run on the pooled leg too: every upstream rule through the pooler."""


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    chosen = any(
        mark.args and mark.args[0] == "store_url"
        for mark in metafunc.definition.iter_markers("parametrize")
    )
    if "store_url" in metafunc.fixturenames and not chosen:
        module = metafunc.module.__name__.rpartition(".")[2]
        backends = [*BACKENDS, POOLED] if module.startswith(POOLED_MODULES) else BACKENDS
        metafunc.parametrize("store_url", backends, indirect=True)


def every_process_projects(url: str) -> str:
    """``url``, with each process projecting every commit itself on PostgreSQL
    (``projecting=every``), for tests of how processes that all project meet; SQLite and
    memory stores always do."""
    if not url.startswith(("postgresql://", "postgres://")):
        return url
    return f"{url}{'&' if '?' in url else '?'}projecting=every"


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def store_url(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> str:
    """A URL to a new, empty store on the parametrised backend."""
    backend = request.param
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path_factory.mktemp('store') / 'runledger.db'}"
    if backend == "pgbouncer":
        pooled: str = request.getfixturevalue("pgbouncer_store_url")
        return pooled
    url: str = request.getfixturevalue("postgres_store_url")
    return url


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ]
)
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A new, empty store that outlives the stores opened on it: a SQLite file or a database."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'runledger.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


@pytest.fixture
def runtime(store_url: str, clock: FakeClock) -> Iterator[StoreRuntime]:
    """The internals behind ``store`` (storage, views, projector), for tests that need them."""
    with open_runtime(store_url, clock=clock) as opened:
        yield opened


@pytest.fixture
def store(runtime: StoreRuntime) -> WorkflowStore:
    """The public store over ``runtime``: what a host gets from ``open_store``."""
    return WorkflowStore(runtime)


@pytest.fixture
def second_store(
    store_url: str, runtime: StoreRuntime, clock: FakeClock
) -> Iterator[WorkflowStore]:
    """Another store on the same data: another process's store, with a cache of its own (one
    memory store shares the first one's storage, as a memory store cannot be opened twice)."""
    if store_url == "memory://":
        yield WorkflowStore(
            StoreRuntime(
                runtime.storage,
                runtime.views,
                url=store_url,
                clock=clock,
                embedded_projections=False,
            )
        )
        return
    with open_runtime(store_url, clock=clock) as other:
        yield WorkflowStore(other)
