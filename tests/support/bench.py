"""A quick bench on the durable backend a test is parametrised with (``DURABLE``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from runledger.infrastructure.cli.bench.runner import Bench
from tests.integration.conftest import BACKENDS

DURABLE = [param for param in BACKENDS if param.values[0] != "memory"]
"""SQLite and PostgreSQL: the bench measures storage, which memory has not."""


@contextmanager
def durable_bench(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, *, events: int
) -> Iterator[Bench]:
    """A quick bench with ``events``-event histories on ``request.param``'s backend, whose
    scratch databases go when the block ends."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('bench') / 'bench.db'}"
    else:
        url = request.getfixturevalue("postgres_url")
    opened = Bench(url, events=events, seconds=0.2, advance=lambda _: None, quick=True)
    try:
        yield opened
    finally:
        opened.scratch.close()
