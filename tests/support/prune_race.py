"""The command side of the prune race (tests/integration/test_prune_race.py): one command on a
settled tree, run in another thread or another process at the moment the prune starts."""

from __future__ import annotations

import time
from typing import Any

from runledger.domain.errors import RunArchivedError
from runledger.infrastructure.store import WorkflowStore, open_store

KINDS = ("update", "continue")
"""``update`` writes to a run of the tree (its versions move); ``continue`` creates a
continuation of its root (a new run in the tree, nothing written to the parent)."""


def late_run(root: str) -> str:
    return f"{root}-late"


def run_command(store: WorkflowStore, kind: str, root: str, child: str) -> tuple[str, str]:
    """("ok", ""), ("archived", "") or ("error", what was raised)."""
    try:
        if kind == "update":
            store.publish_update(
                child, attempt_id="a", update_type="race", key="k", data={"tree": root}
            )
        else:
            store.create_run(late_run(root), workflow_name="race", input={}, parent_run_id=root)
    except RunArchivedError:
        return "archived", ""
    except Exception as error:
        return "error", f"{type(error).__name__}: {error}"
    return "ok", ""


def command_process(url: str, jobs: Any, results: Any, barrier: Any) -> None:
    """Another process's store: each job waits at the barrier with the prune, then runs."""
    with open_store(url) as store:
        results.put(("ready", ""))
        while (job := jobs.get()) is not None:
            kind, root, child, delay = job
            barrier.wait()
            time.sleep(delay)
            results.put(run_command(store, kind, root, child))
