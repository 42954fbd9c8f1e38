"""A controllable clock for deterministic event times."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta


class FakeClock:
    """Returns a fixed instant that advances one millisecond per reading (or as told)."""

    def __init__(self, start: datetime | None = None, step: timedelta = timedelta(milliseconds=1)):
        self.current = start or datetime(2026, 1, 1, tzinfo=UTC)
        self.step = step

    def __call__(self) -> datetime:
        moment = self.current
        self.current = self.current + self.step
        return moment

    def advance(self, delta: timedelta) -> None:
        self.current += delta
