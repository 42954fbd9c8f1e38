"""Realistic event histories, generated fast for benchmarks and soak tests.

The events come from the real aggregates and the same domain functions the commands call
(so they are exactly what commands would write), but without the application's load/save
round trip per command: whole runs are built in memory and stored in large batches.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime, timedelta
from uuid import UUID

from eventsourcing.domain import CanMutateAggregate
from eventsourcing.persistence import StoredEvent

from runledger.domain.aggregates import AggregateSet
from runledger.domain.outbox import queue_follow_up, remove_follow_up
from runledger.domain.run_endings import finish_run
from runledger.domain.runs import Run
from runledger.domain.settings_changes import change_settings, ensure_settings_scope
from runledger.domain.settings_policy import check_policy
from runledger.domain.values import HOST, Actor
from runledger.infrastructure.commits.mapper import LedgerMapper


class HistoryGenerator:
    """Writes runs with progress, follow-ups, endings, terminal messages and turns."""

    def __init__(
        self,
        *,
        seed: int = 7,
        start: datetime | None = None,
        prefix: str = "bench",
        delivered: bool = False,
    ) -> None:
        self.delivered = delivered
        """Each follow-up kept is delivered (its message sent) as soon as it is queued, so every
        run's tree ends settled (retention's benchmarks); otherwise they stay queued."""
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
        paths = ["src/app.py", "tests/test_app.py"]
        run = aggregates.add(self._new_run(run_id, self.runs, paths=paths))
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
            elif self.delivered:
                message = aggregates.message(queued.follow_up.workflow_message_id)
                message.adopt_entry(f"entry-{self.runs}-{index}", actor=session, now=self._tick())
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
        return self._stored(events)

    def _new_run(self, run_id: str, number: int, *, paths: list[str] | None = None) -> Run:
        """A running root review run of pull request ``number`` (and its paths), just created."""
        return Run.create(
            run_id,
            workflow_name="review",
            input={"pr": number} if paths is None else {"pr": number, "paths": paths},
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
        self, run_id: str, changes: int, *, batch_events: int = 5000
    ) -> Iterator[list[StoredEvent]]:
        """A run with its root settings scope, whose ``counter`` is replaced ``changes`` times."""
        aggregates = AggregateSet()
        aggregates.add(self._new_run(run_id, 0))
        scope = ensure_settings_scope(
            aggregates,
            run_id,
            mount_path="",
            invocation=1,
            settings={"counter": 0},
            policy=check_policy(
                {"rules": [{"path": "/counter", "permissions": {"human": ["replace"]}}]}
            ),
            actor=HOST,
            now=self._tick(),
        )
        human = Actor("human", "bench-user")

        def chunks() -> Iterator[list[StoredEvent]]:
            yield self._stored(aggregates.collect_events())
            for number in range(1, changes + 1):
                change_settings(
                    aggregates,
                    run_id,
                    scope.scope_id,
                    request_id=f"change-{number}",
                    patch=[{"op": "replace", "path": "/counter", "value": number}],
                    actor=human,
                    source="interactive-command",
                    expected_change_number=None,
                    now=self._tick(),
                )
                yield self._stored(aggregates.collect_events())

        return _batched(chunks(), batch_events)

    def created_runs(self, runs: int, *, batch_events: int = 5000) -> Iterator[list[StoredEvent]]:
        """``runs`` new runs (``<prefix>-run-1`` ...), each just created."""
        return _batched(
            (
                self._stored(self._new_run(f"{self.prefix}-run-{number}", number).collect_events())
                for number in range(1, runs + 1)
            ),
            batch_events,
        )

    def batches(
        self, total_events: int, *, follow_ups_per_run: int = 30, batch_events: int = 5000
    ) -> Iterator[list[StoredEvent]]:
        """Batches of stored events, about ``total_events`` in all, in log order."""

        def whole_runs() -> Iterator[list[StoredEvent]]:
            written = 0
            while written < total_events:
                events = self.run_events(follow_ups_per_run)
                written += len(events)
                yield events

        return _batched(whole_runs(), batch_events)

    def _stored(self, events: Iterable[CanMutateAggregate[UUID]]) -> list[StoredEvent]:
        return [self.mapper.to_stored_event(event) for event in events]


def _batched(chunks: Iterable[list[StoredEvent]], batch_events: int) -> Iterator[list[StoredEvent]]:
    """The chunks' events in batches of at least ``batch_events`` (the last may be smaller);
    a chunk (one run's life, one command's events) is never split."""
    batch: list[StoredEvent] = []
    for chunk in chunks:
        batch.extend(chunk)
        if len(batch) >= batch_events:
            yield batch
            batch = []
    if batch:
        yield batch
