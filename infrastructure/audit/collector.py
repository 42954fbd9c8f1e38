"""Pausing Python's cyclic garbage collector while an audit builds its working set.

An export, an offline verify or a run's verification holds tens of thousands of containers
until it ends (the parsed bundle lines, the stored events, the scratch read models' rows and
pages), and every generation-2 collection walks all of them again: about a third of
``verify_bundle``'s CPU on a 16k-event run. None of it is garbage before the step ends,
so the step runs with the collector paused: reference counting frees the working set after
it, and whatever cycles it (or another thread, meanwhile) made wait for the collector's next
run.
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
