"""Hypothesis profiles for the property tests, and the store they run against.

``ci`` (the default) is what ``.ci/run`` runs: enough examples to matter, quick enough for
every run. ``soak`` multiplies them for a long local search (``--hypothesis-profile=soak``).
Neither writes a ``.hypothesis`` database into the checkout: a failure prints its seed and
the falsifying example, and ``@reproduce_failure`` replays it.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, settings

from tests.integration.conftest import (
    clock,
    pytest_generate_tests,
    runtime,
    store,
    store_url,
)

# The integration tests' store fixture, parametrised (by their pytest_generate_tests) over
# memory, a SQLite file and PostgreSQL.
__all__ = ["clock", "pytest_generate_tests", "runtime", "store", "store_url"]

_SHARED: dict[str, Any] = {
    "deadline": None,
    "database": None,
    "print_blob": True,
    # One store serves every example of a test (a store per example would cost more than
    # the example), so the function-scoped fixture is shared on purpose.
    "suppress_health_check": [HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
}
settings.register_profile("ci", max_examples=100, **_SHARED)
settings.register_profile("soak", max_examples=1000, **_SHARED)
if settings.get_current_profile_name() == "default":
    # Only when no ``--hypothesis-profile`` was given: this module loads after that option.
    settings.load_profile("ci")
