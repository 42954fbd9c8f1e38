"""Pausing Python's cyclic garbage collector while an audit or a rebuild builds its
working set.

A rebuild keeps each projection's cache of recent rows and its page's writes alive while
gen-2 collections walk them: at 1M events, a third of a blue/green rebuild's CPU (45-51 s ->
33 s of user time with the collector off), and not one cycle to free (the peak RSS is 81 MB
either way). Commands meanwhile make a few cycles (730 objects in 6,000 commands), which wait
for the rebuild's end.

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
