"""Which runs an audit covers: the run, its lineage, or the whole tree it belongs to.

Ancestors come from the runs' own events (each run names its parent). Descendants are found
through the runs read model, the one index from a run to its children (by root run), and the
parent links of its rows; ``verify_run`` compares those rows with a re-projection too.
"""

from __future__ import annotations

from collections.abc import Iterator

from runledger.domain.errors import RunNotFoundError
from runledger.domain.lineage import MAX_LINEAGE_DEPTH
from runledger.domain.records import RunRecord, RunSummary
from runledger.domain.runs import check_run_id
from runledger.infrastructure.runtime import StoreRuntime
from runledger.projections import runs as runs_model

_PAGE = 1000


def audited_run(runtime: StoreRuntime, run_id: object) -> RunRecord:
    """The run an audit is about as it was created (its id and lineage: an audit reads its
    events itself), or ``RunNotFoundError``."""
    checked = check_run_id(run_id)
    run = runtime.app.get_run_as_created(checked)
    if run is None:
        raise RunNotFoundError(checked)
    return run


def lineage_runs(runtime: StoreRuntime, run: RunRecord) -> list[str]:
    """The run's ancestors, the run and its descendants, in creation order."""
    ancestors: list[str] = []
    current = run
    while current.parent_run_id is not None and len(ancestors) < MAX_LINEAGE_DEPTH:
        parent = runtime.app.get_run_as_created(current.parent_run_id)
        if parent is None:
            break
        ancestors.append(parent.run_id)
        current = parent
    tree = list(_tree(runtime, run.root_run_id))
    children: dict[str, list[str]] = {}
    for summary in tree:
        if summary.parent_run_id is not None:
            children.setdefault(summary.parent_run_id, []).append(summary.run_id)
    descendants: set[str] = set()
    pending = [run.run_id]
    while pending:
        for child in children.get(pending.pop(), ()):
            if child not in descendants:
                descendants.add(child)
                pending.append(child)
    chosen = {*ancestors, run.run_id, *descendants}
    return _in_creation_order(chosen, tree)


def tree_runs(runtime: StoreRuntime, run: RunRecord) -> list[str]:
    """Every run with the run's root, in creation order: the set that no write crosses.

    A settings scope moves from a parent to a child and a bad end cancels its ancestors'
    follow-ups, so a read-model row of one run can depend on events of any run of its tree,
    siblings included, but never on a run of another tree.
    """
    tree = list(_tree(runtime, run.root_run_id))
    return _in_creation_order({run.run_id, *(summary.run_id for summary in tree)}, tree)


def _tree(runtime: StoreRuntime, root_run_id: str) -> Iterator[RunSummary]:
    reader = runtime.reader(runs_model.RunsProjection.name)
    after: str | None = None
    while True:
        page = runs_model.list_runs(reader, root_run_id=root_run_id, after=after, limit=_PAGE)
        yield from page.runs
        if page.next_after is None:
            return
        after = page.next_after


def _in_creation_order(chosen: set[str], tree: list[RunSummary]) -> list[str]:
    ordered = [summary.run_id for summary in tree if summary.run_id in chosen]
    # A run the runs model does not list (it lags, or lost the row) still belongs to the audit.
    return ordered + sorted(chosen - set(ordered))
