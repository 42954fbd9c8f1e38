"""Realistic event histories, generated fast for benchmarks and soak tests.

The events come from the real aggregates and the same domain functions the commands call
(so they are exactly what commands would write), but without the application's load/save
round trip per command: whole runs are built in memory and stored in large batches.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

from eventsourcing.persistence import StoredEvent

from runledger.domain.aggregates import AggregateSet
from runledger.domain.canonical import json_digest
from runledger.domain.outbox import queue_follow_up, remove_follow_up
from runledger.domain.run_endings import finish_run
from runledger.domain.runs import Run
from runledger.domain.serialisation import LedgerMapper
from runledger.domain.settings_policy import check_policy
from runledger.domain.settings_scopes import SettingsScope
from runledger.domain.values import HOST, Actor


class HistoryGenerator:
    """Writes runs with progress, follow-ups, endings, terminal messages and turns."""

    def __init__(
        self, *, seed: int = 7, start: datetime | None = None, prefix: str = "bench"
    ) -> None:
        self.random = random.Random(seed)  # noqa: S311 - a reproducible mix, not a secret
        self.now = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.prefix = prefix
        self.mapper = LedgerMapper()
        self.runs = 0

    def _tick(self) -> datetime:
        self.now += timedelta(milliseconds=1)
        return self.now

    def run_events(self, follow_ups: int) -> list[StoredEvent]:
        """One run's whole life, about ``3 * follow_ups + 10`` events."""
        self.runs += 1
        run_id = f"{self.prefix}-run-{self.runs}"
        session_id = f"{self.prefix}-session-{self.runs % 50}"
        aggregates = AggregateSet()
        run = aggregates.add(
            Run.create(
                run_id,
                workflow_name="review",
                input={"pr": self.runs, "paths": ["src/app.py", "tests/test_app.py"]},
                workflow_ref="builtin:review",
                title=f"Review #{self.runs}",
                status="running",
                parent=None,
                lineage_kind=None,
                parent_terminal_fingerprint=None,
                actor=HOST,
                now=self._tick(),
            )
        )
        run.bind_origin_session(session_id, "interactive", actor=HOST, now=self._tick())
        session = Actor("session", session_id)
        for node in ("lint", "test"):
            run.record_progress(
                status="running",
                current_node=node,
                current_attempt_id=f"{node}-1",
                waiting_on=None,
                status_detail=None,
                actor=HOST,
                now=self._tick(),
            )
        for index in range(follow_ups):
            queued = queue_follow_up(
                aggregates,
                run_id,
                request_id=f"request-{index}",
                target_session_id=session_id,
                actor=session,
                source="pi-session",
                prompt=f"Follow-up {index} of {run_id}: also check the edge cases.",
                now=self._tick(),
            )
            if self.random.random() < 0.1:
                remove_follow_up(
                    aggregates,
                    run_id,
                    queued.follow_up.follow_up_id,
                    actor=Actor("human"),
                    source="interactive-command",
                    now=self._tick(),
                )
        failed = self.random.random() < 0.3
        finish_run(
            aggregates,
            run,
            status="failed" if failed else "completed",
            final_output=None if failed else {"approved": True, "comments": 3},
            error="tests failed" if failed else None,
            status_detail=None,
            actor=HOST,
            now=self._tick(),
        )
        if run.terminal_message_id is None:
            raise RuntimeError("a bound, interactive run always gets a terminal message")
        terminal = aggregates.message(run.terminal_message_id)
        terminal.adopt_entry(f"entry-{self.runs}", actor=session, now=self._tick())
        turn_id = f"{self.prefix}-turn-{self.runs}"
        terminal.start_turn(turn_id, actor=session, now=self._tick())
        terminal.end_turn(
            turn_id,
            stop_reason="completed",
            response_session_entry_id=f"response-{self.runs}",
            actor=session,
            now=self._tick(),
        )
        events = aggregates.collect_events()
        events.sort(key=lambda event: event.timestamp)
        return [self.mapper.to_stored_event(event) for event in events]

    def _new_run(self, run_id: str, number: int) -> Run:
        """A running root review run, just created."""
        return Run.create(
            run_id,
            workflow_name="review",
            input={"pr": number},
            workflow_ref="builtin:review",
            title=f"Review #{number}",
            status="running",
            parent=None,
            lineage_kind=None,
            parent_terminal_fingerprint=None,
            actor=HOST,
            now=self._tick(),
        )

    def settings_events(
        self, scope_id: str, changes: int, *, batch_events: int = 5000
    ) -> Iterator[list[StoredEvent]]:
        """A run with one settings scope whose ``counter`` is replaced ``changes`` times."""
        run_id = scope_id.split(":", 1)[0]
        run = self._new_run(run_id, 0)
        scope = SettingsScope.create(
            scope_id,
            run_id=run_id,
            origin_run_id=run_id,
            mount_path="",
            invocation=1,
            policy=check_policy(
                {"rules": [{"path": "/counter", "permissions": {"human": ["replace"]}}]}
            ),
            settings={"counter": 0},
            actor=HOST,
            now=self._tick(),
        )
        human = Actor("human", "bench-user")
        batch = [
            self.mapper.to_stored_event(e) for e in (*run.collect_events(), *scope.collect_events())
        ]
        for number in range(1, changes + 1):
            patch = [{"op": "replace", "path": "/counter", "value": number}]
            scope.change(
                f"change-{number}",
                patch=patch,
                patch_digest=json_digest(patch),
                actor=human,
                source="interactive-command",
                now=self._tick(),
            )
            batch.extend(self.mapper.to_stored_event(e) for e in scope.collect_events())
            if len(batch) >= batch_events:
                yield batch
                batch = []
        if batch:
            yield batch

    def created_runs(self, runs: int, *, batch_events: int = 5000) -> Iterator[list[StoredEvent]]:
        """``runs`` new runs (``<prefix>-run-1`` ...), each just created."""
        batch: list[StoredEvent] = []
        for number in range(1, runs + 1):
            run = self._new_run(f"{self.prefix}-run-{number}", number)
            batch.extend(self.mapper.to_stored_event(e) for e in run.collect_events())
            if len(batch) >= batch_events:
                yield batch
                batch = []
        if batch:
            yield batch

    def batches(
        self, total_events: int, *, follow_ups_per_run: int = 30, batch_events: int = 5000
    ) -> Iterator[list[StoredEvent]]:
        """Batches of stored events, about ``total_events`` in all, in log order."""
        written = 0
        batch: list[StoredEvent] = []
        while written < total_events:
            events = self.run_events(follow_ups_per_run)
            batch.extend(events)
            written += len(events)
            if len(batch) >= batch_events:
                yield batch
                batch = []
        if batch:
            yield batch
