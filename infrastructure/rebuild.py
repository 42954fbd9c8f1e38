"""Rebuilding several projections on several cores at once.

A rebuild is CPU-bound Python, so threads would share one core. Each group of projections is
replayed by a process of its own, reading the log itself and committing its own pages; the
groups touch disjoint tables and tracking rows, so they never conflict.
"""

from __future__ import annotations

import multiprocessing
import queue
from collections.abc import Callable, Sequence
from typing import Any, Final

# Relative cost of replaying each projection, measured with cProfile on generated histories.
WEIGHTS: Final = {"viewer_deltas": 3, "session_outbox": 2, "follow_up_queue": 2, "terminal_data": 1}


def split(names: Sequence[str], groups: int) -> list[list[str]]:
    """Spread projections over ``groups`` with the heaviest first, each to the lightest group."""
    buckets: list[list[str]] = [[] for _ in range(groups)]
    loads = [0] * groups
    for name in sorted(names, key=lambda n: -WEIGHTS.get(n, 1)):
        lightest = loads.index(min(loads))
        buckets[lightest].append(name)
        loads[lightest] += WEIGHTS.get(name, 1)
    return [bucket for bucket in buckets if bucket]


def _rebuild_group(url: str, names: list[str], messages: Any) -> None:
    from infrastructure.store import open_store

    try:
        with open_store(url, embedded_projections=False, projections=names) as store:
            read = store.projector.rebuild(names, progress=lambda n: messages.put(("page", n)))
        messages.put(("done", read))
    except BaseException as error:
        messages.put(("error", f"{type(error).__name__}: {error}"))
        raise


def rebuild_in_processes(
    url: str, groups: list[list[str]], progress: Callable[[int], None] | None
) -> int:
    """Rebuild each group in its own process; returns the events each of them read."""
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    processes = [
        context.Process(target=_rebuild_group, args=(url, group, messages), daemon=True)
        for group in groups
    ]
    for process in processes:
        process.start()
    finished: list[int] = []
    errors: list[str] = []
    try:
        while len(finished) + len(errors) < len(processes):
            try:
                kind, value = messages.get(timeout=1.0)
            except queue.Empty:
                if not any(process.is_alive() for process in processes):
                    errors.append("a rebuild process died without reporting")
                continue
            if kind == "page" and progress is not None:
                # Every process reads the whole log; report the log's progress, not the sum.
                progress(round(value / len(processes)))
            elif kind == "done":
                finished.append(value)
            elif kind == "error":
                errors.append(value)
    finally:
        for process in processes:
            process.join(timeout=60)
    if errors:
        raise RuntimeError("parallel rebuild failed: " + "; ".join(errors))
    return max(finished, default=0)
