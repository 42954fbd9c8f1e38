"""What the run console reads: the runs list newest first, counts, one run's whole picture.

Every answer is composed from the store's public queries and its event log (the run's own
events name its decisions, effects, messages, turns, settings changes and lease), so the
console shows nothing the store would not answer to any other client.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from runledger.domain.effects import Effect, effect_id_for
from runledger.domain.errors import RunNotFoundError
from runledger.domain.human_decisions import HumanDecision
from runledger.domain.records import LoggedEvent, RunPage, RunSummary
from runledger.domain.runs import Run
from runledger.domain.settings_scopes import SettingsScope
from runledger.domain.workflow_messages import WorkflowMessage
from runledger.infrastructure.runtime import StoreRuntime
from runledger.infrastructure.store import WorkflowStore
from runledger.projections import runs

LOG_PAGE: Final = 1000
CACHED_RUNS: Final = 64
LINEAGE_LIMIT: Final = 1000
"""Runs of one lineage tree shown at most (a tree that large is a loop gone wrong)."""
SESSION_EVENTS_TAIL: Final = 50
SHOWN_AT_MOST: Final = 100
"""The latest messages, decisions and effects an overview holds (with how many there are):
a run with 10,000 follow-ups has as many messages, which no page shows at once."""
MAX_EVENTS_PAGE: Final = 1000


def newest_runs(
    runtime: StoreRuntime, filters: dict[str, str], before: str | None, limit: int
) -> dict[str, Any]:
    """A page of runs newest first, the log position it was read at, and counts by status."""
    with runtime.running():
        # Read first: a run written after this position reaches the feed, never the gap.
        position = runtime.storage.max_position()
        reader = runtime.reader("runs")
        page: RunPage = runs.newest_runs(reader, filters=filters, before=before, limit=limit)
        counts = runs.count_runs(reader, filters=filters)
    return {
        "runs": page.runs,
        "next_before": page.next_after,
        "counts": counts,
        "position": position,
    }


def runs_by_id(runtime: StoreRuntime, run_ids: Sequence[str]) -> list[RunSummary]:
    """The runs list entries of ``run_ids``."""
    with runtime.running():
        return runs.runs_by_id(runtime.reader("runs"), run_ids)


def log_after(store: WorkflowStore, after: int) -> list[LoggedEvent]:
    """The next events of the whole log after ``after``."""
    return store.event_log(after=after, limit=LOG_PAGE)


@dataclass
class _RunLog:
    """What a run's own events name, gathered in one pass over its log."""

    decisions: list[str] = field(default_factory=list)
    effects: list[str] = field(default_factory=list)
    messages: list[str] = field(default_factory=list)
    turns: dict[str, list[str]] = field(default_factory=dict)
    changes: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    lease: dict[str, Any] | None = None
    wire_names: dict[str, int] = field(default_factory=dict)
    position: int = 0

    def take(self, event: LoggedEvent) -> None:
        """Note what ``event`` names (the caller passes only the run's own events)."""
        name, payload = event.wire_name, event.payload
        self.wire_names[name] = self.wire_names.get(name, 0) + 1
        if name == HumanDecision.Requested.TOPIC:
            self.decisions.append(payload["decision_id"])
        elif name == Effect.Reserved.TOPIC:
            effect = effect_id_for(payload["run_id"], payload["effect_type"], payload["key"])
            self.effects.append(effect)
        elif name == WorkflowMessage.Created.TOPIC:
            self.messages.append(payload["workflow_message_id"])
        elif name == WorkflowMessage.TurnStarted.TOPIC:
            self.turns.setdefault(payload["workflow_message_id"], []).append(
                payload["workflow_turn_id"]
            )
        elif name == SettingsScope.Changed.TOPIC:
            self.changes.setdefault(payload["scope_id"], []).append(
                {
                    "change_number": payload["change_number"],
                    "request_id": payload["request_id"],
                    "actor": event.actor,
                    "source": payload["source"],
                    "changed_paths": payload["changed_paths"],
                    "patch": payload["patch"],
                    "accepted_at": event.recorded_at,
                }
            )
        else:
            self._lease(event)

    def _lease(self, event: LoggedEvent) -> None:
        name, payload = event.wire_name, event.payload
        if name == Run.Claimed.TOPIC:
            self.lease = {
                "owner_type": payload["owner_type"],
                "owner_id": payload["owner_id"],
                "generation": payload["generation"],
                "lease_ms": payload["lease_ms"],
                "claimed_at": event.recorded_at,
                "expires_at": payload["expires_at"],
                "released_at": None,
            }
        elif name == Run.ClaimRenewed.TOPIC and self.lease is not None:
            self.lease["expires_at"] = payload["expires_at"]
        elif name == Run.ClaimReleased.TOPIC and self.lease is not None:
            self.lease["released_at"] = event.recorded_at

    def copy(self) -> _RunLog:
        """A copy another thread may read while this one is read on."""
        return _RunLog(
            decisions=list(self.decisions),
            effects=list(self.effects),
            messages=list(self.messages),
            turns={message: list(turns) for message, turns in self.turns.items()},
            changes={scope: list(changes) for scope, changes in self.changes.items()},
            lease=None if self.lease is None else dict(self.lease),
            wire_names=dict(self.wire_names),
            position=self.position,
        )

    def read_on(self, store: WorkflowStore, run_id: str) -> None:
        """Take the run's events logged after the last one taken."""
        while True:
            page = store.event_log(after=self.position, limit=LOG_PAGE, run_id=run_id)
            for event in page:
                if event.payload.get("run_id") == run_id:
                    self.take(event)
            if page:
                self.position = page[-1].position
            if len(page) < LOG_PAGE:
                return


class RunLogs:
    """Each recently viewed run's gathered log, read on from where it stopped: a live page
    over a run with 10,000 follow-ups reads its 30,000 events once, then only what is new."""

    def __init__(self, size: int = CACHED_RUNS) -> None:
        self._size = size
        self._logs: OrderedDict[str, _RunLog] = OrderedDict()
        self._lock = threading.Lock()

    def of(self, store: WorkflowStore, run_id: str) -> _RunLog:
        """What the run's own events name, up to now (a copy: the caller's to keep)."""
        with self._lock:
            log = self._logs.pop(run_id, None) or _RunLog()
            log.read_on(store, run_id)
            self._logs[run_id] = log
            while len(self._logs) > self._size:
                self._logs.popitem(last=False)
            return log.copy()


def _change_number(change: dict[str, Any]) -> int:
    number: int = change["change_number"]
    return number


def _present(records: Sequence[Any]) -> list[Any]:
    return [record for record in records if record is not None]


def run_overview(
    store: WorkflowStore, runtime: StoreRuntime, logs: RunLogs, run_id: str
) -> dict[str, Any]:
    """Everything the run page shows beside the follow-up queue and the event history."""
    run = store.get_run(run_id)
    if run is None:
        raise RunNotFoundError(run_id)
    log = logs.of(store, run_id)
    with runtime.running():
        lineage = runs.newest_runs(
            runtime.reader("runs"),
            filters={"root_run_id": run.root_run_id},
            limit=LINEAGE_LIMIT,
        ).runs
    messages = [
        {
            "message": message,
            "turns": _present(
                [store.get_turn(turn) for turn in log.turns.get(message.workflow_message_id, [])]
            ),
        }
        for message in _present(
            [store.get_workflow_message(m) for m in log.messages[-SHOWN_AT_MOST:]]
        )
    ]
    active = store.settings_scopes(run_id)
    # A scope that moved here with a continuation was changed under its earlier runs.
    for origin in dict.fromkeys(s.origin_run_id for s in active if s.origin_run_id != run_id):
        for scope_id, changes in logs.of(store, origin).changes.items():
            log.changes.setdefault(scope_id, []).extend(changes)
    scopes = [
        {
            "scope": scope,
            "changes": sorted(log.changes.get(scope.scope_id, []), key=_change_number),
        }
        for scope in active
    ]
    segments = store.session_segments(run_id)
    recorded = sum(segment.event_count for segment in segments)
    tail_start = max(0, recorded - SESSION_EVENTS_TAIL)
    return {
        "run": run,
        "lineage": sorted(lineage, key=lambda summary: summary.created_at),
        "decisions": _present(
            [store.get_human_decision(d) for d in log.decisions[-SHOWN_AT_MOST:]]
        ),
        "decisions_total": len(log.decisions),
        "effects": _present([store.get_effect(e) for e in log.effects[-SHOWN_AT_MOST:]]),
        "effects_total": len(log.effects),
        "messages": messages,
        "messages_total": len(log.messages),
        "settings": scopes,
        "lease": log.lease,
        "segments": segments,
        "session_entries": store.session_entries(run_id, limit=SESSION_EVENTS_TAIL),
        "session_events": store.session_events(run_id, start=tail_start, limit=SESSION_EVENTS_TAIL),
        "wire_names": log.wire_names,
        "position": log.position,
    }


def run_events(
    store: WorkflowStore, run_id: str, *, after: int, limit: int, wire_name: str | None
) -> dict[str, Any]:
    """A page of the run's own events after a log position, of one wire name if given."""
    if store.get_run(run_id) is None:
        raise RunNotFoundError(run_id)
    found: list[LoggedEvent] = []
    cursor = after
    # Most of a run's log is its own: read a little more than asked, not a whole log page.
    chunk = LOG_PAGE if wire_name is not None else min(LOG_PAGE, limit + 16)
    while len(found) < limit:
        page = store.event_log(after=cursor, limit=chunk, run_id=run_id)
        for event in page:
            cursor = event.position
            if event.payload.get("run_id") == run_id and wire_name in (None, event.wire_name):
                found.append(event)
                if len(found) == limit:
                    break
        if len(page) < chunk:
            break
    more = len(found) == limit
    return {"events": found, "next_after": cursor if more else None}


__all__: Sequence[str] = [
    "RunLogs",
    "log_after",
    "newest_runs",
    "run_events",
    "run_overview",
    "runs_by_id",
]
