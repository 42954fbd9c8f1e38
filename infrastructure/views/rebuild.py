"""Rebuilding several projections on several cores at once.

A rebuild is CPU-bound Python, so threads would share one core. Each group of projections is
replayed by a process of its own, reading the log itself and committing its own pages; the
groups touch disjoint tables and tracking rows, so they never conflict.

A group's process dies with the process that started it (``die_with_parent``): an operator who
kills a rebuild means stop, so no build goes on, and no switch happens, after the parent is
gone. What a killed build committed stays in its ``building`` slot, and the next rebuild
resumes it (``--restart`` starts afresh); its lock is free as soon as its holder is gone.
"""

from __future__ import annotations

import ctypes
import multiprocessing
import multiprocessing.connection
import os
import queue
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Final

from runledger.domain.errors import RebuildFailedError
from runledger.projections.base import Projection


def split(projections: Sequence[Projection], groups: int) -> list[list[str]]:
    """Spread projections over ``groups`` with the heaviest first, each to the lightest group;
    each group by name."""
    buckets: list[list[str]] = [[] for _ in range(groups)]
    loads = [0] * groups
    for projection in sorted(projections, key=lambda p: -p.rebuild_weight):
        lightest = loads.index(min(loads))
        buckets[lightest].append(projection.name)
        loads[lightest] += projection.rebuild_weight
    return [bucket for bucket in buckets if bucket]


_PR_SET_PDEATHSIG: Final = 1
ORPHANED_EXIT_CODE: Final = 70
"""How a group's process ends when it finds its parent gone (``EX_SOFTWARE``)."""


def die_with_parent() -> None:
    """End this spawned process as soon as the process that started it ends.

    On Linux the kernel kills it (``PR_SET_PDEATHSIG``), at once and whatever it is doing;
    elsewhere, and as a fallback, a thread waits for end-of-file on the pipe that
    multiprocessing keeps open from the parent, and exits the process there. Neither needs
    the parent's cooperation, so a parent killed with SIGKILL takes its groups along. A
    transaction cut short this way is rolled back by the database, like any crash.
    """
    parent = multiprocessing.parent_process()
    if parent is None:
        return
    if sys.platform == "linux":
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    sentinel = parent.sentinel

    def watch() -> None:
        multiprocessing.connection.wait([sentinel])
        os._exit(ORPHANED_EXIT_CODE)

    threading.Thread(target=watch, name="runledger-parent-watch", daemon=True).start()
    # The parent may have died before the kernel was told to signal its death.
    if not parent.is_alive():
        os._exit(ORPHANED_EXIT_CODE)


GroupRebuild = Callable[[str, list[str], Any, dict[str, Any]], None]
"""Rebuilds one group in a spawned process: ``(url, names, messages, options)``; it reports
on ``messages`` (``("page", n)``, ``("done", [outcome as JSON, ...])``, ``("error", text)``,
or ``("corrupt", text)`` for a corrupt stored event). A module-level function, so the
spawned process can import it by name."""


def rebuild_in_processes(
    rebuild_group: GroupRebuild,
    url: str,
    groups: list[list[str]],
    progress: Callable[[int], None] | None,
    options: dict[str, Any] | None = None,
) -> list[Any]:
    """Rebuild each group in its own process; returns what each group reported, together."""
    context = multiprocessing.get_context("spawn")
    messages = context.Queue()
    processes = [
        context.Process(
            target=rebuild_group, args=(url, group, messages, options or {}), daemon=True
        )
        for group in groups
    ]
    for process in processes:
        process.start()
    finished: list[list[Any]] = []
    errors: list[str] = []
    corrupt = False
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
            elif kind in ("error", "corrupt"):
                errors.append(value)
                corrupt = corrupt or kind == "corrupt"
    finally:
        for process in processes:
            process.join(timeout=60)
    if errors:
        # A WorkflowError, so the CLI reports it (a corrupt event among them) and exits 1.
        raise RebuildFailedError("; ".join(errors), corrupt=corrupt)
    return [outcome for outcomes in finished for outcome in outcomes]
