"""Pausing Python's cyclic garbage collector while an audit builds its working set.

An export or an offline verify holds tens of thousands of containers until it ends (the
parsed bundle lines, the scratch read models' rows and pages), and every generation-2
collection walks all of them again: about a third of ``verify_bundle``'s CPU on a
16k-event run. None of them needs the collector (they form no reference cycles; reference
counting frees them when the step ends), so the step runs with it paused; whatever cyclic
garbage other threads make meanwhile waits for the collector's next run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Run the block with the cyclic collector off, then turn it back on if it was on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
