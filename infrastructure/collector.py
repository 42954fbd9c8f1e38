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

A long-lived process that answers queries is the other case: the modules it imported (about
57,000 containers for runledger, psycopg, pydantic and the rest) are walked by every
generation-2 collection, 18-43 ms each on this project's 2-core machine, and a fresh
process reading pages of 256 rows started one every ~130 pages. ``freeze_heap`` moves what
is alive once startup is done into the collector's permanent generation (``gc.freeze``): it
lives as long as the process anyway, and later collections walk only what came after
(0.4-0.8 ms each; the slowest of 2,000 page reads 31-55 ms -> 8-10 ms).
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


def freeze_heap() -> None:
    """Leave what is alive now (startup's modules, the open store) out of every later
    collection: for a process that goes on to serve (``runledger serve``)."""
    gc.collect()
    gc.freeze()
