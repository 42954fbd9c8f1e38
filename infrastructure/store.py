"""The composition root: ``open_store(url)`` builds a ``WorkflowStore`` on one backend."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Final
from uuid import UUID

from eventsourcing.persistence import Recording

from runledger.domain.application import Clock, WorkflowRuns, utc_now
from runledger.domain.errors import InvalidStoreUrlError, ProjectionStalledError
from runledger.domain.ports import EventStorage
from runledger.domain.records import (
    FollowUpQueue,
    ProjectionStatus,
    RunPage,
    SettingsChange,
    SettingsScopeRecord,
    SnapshotRequired,
    TerminalData,
    UpdateRecord,
    ViewerDeltas,
    WorkflowMessageRecord,
)
from runledger.domain.values import Actor, JsonValue
from runledger.infrastructure.views.projector import Progress, Projector
from runledger.infrastructure.views.rebuild import rebuild_in_processes, split
from runledger.infrastructure.views.store import MemoryViewStore, ViewReaderBase, ViewStore
from runledger.projections import (
    follow_up_queue,
    runs,
    session_outbox,
    settings,
    terminal_data,
    viewer_deltas,
)
from runledger.projections.base import Projection

DEFAULT_URL: Final = "sqlite:///runledger.db"
URL_VARIABLE: Final = "RUNLEDGER_URL"
CATCH_UP_ATTEMPTS: Final = 3

logger = logging.getLogger(__name__)


def default_projections() -> list[Projection]:
    """Every read model of runledger, by its stable name."""
    return [
        follow_up_queue.FollowUpQueueProjection(),
        terminal_data.TerminalDataProjection(),
        viewer_deltas.ViewerDeltasProjection(),
        session_outbox.SessionOutboxProjection(),
        settings.SettingsProjection(),
        runs.RunsProjection(),
    ]


class WorkflowStore(WorkflowRuns):
    """The public entry point: every command, consistent read and read-model query."""

    def __init__(
        self,
        storage: EventStorage,
        views: ViewStore,
        *,
        url: str,
        clock: Clock = utc_now,
        embedded_projections: bool = True,
        projections: Sequence[str] | None = None,
    ) -> None:
        self.url = url
        self.views = views
        self.embedded_projections = embedded_projections
        super().__init__(storage, clock=clock)
        chosen = [p for p in default_projections() if projections is None or p.name in projections]
        self.projector = Projector(storage, views, chosen)
        self._reader = views.reader()
        self._closed = False
        self._wake = threading.Event()
        self._closing = threading.Event()
        self._follower: threading.Thread | None = None
        if embedded_projections:
            self.catch_up()
            self._follower = threading.Thread(
                target=self._follow, name="runledger-projections", daemon=True
            )
            self._follower.start()

    @property
    def backend(self) -> str:
        return self.url.split(":", 1)[0]

    # -- projections follow the log in-process ---------------------------------------------

    def _notify(self, recordings: list[Recording[UUID]]) -> None:  # noqa: ARG002
        # Right after each commit: the committing thread projects it when nobody else is
        # projecting (no thread hand-over, no contention); otherwise the follower thread
        # picks it up with whatever else arrives, and a query catches up itself first.
        if self.embedded_projections and not self._try_catch_up():
            self._wake.set()

    def _try_catch_up(self) -> bool:
        if not self.projector.try_lock():
            return False
        try:
            self.catch_up()
        finally:
            self.projector.unlock()
        return True

    def _follow(self) -> None:
        while not self._closing.is_set():
            self._wake.wait(timeout=1.0)
            self._wake.clear()
            if not self._closing.is_set():
                self.catch_up()

    def catch_up(self, *, progress: Progress | None = None) -> int:
        """Bring every projection up to the end of the log; returns events read.

        A command has already committed when this runs, so a storage failure here must not
        look like a failed command: it is logged, and the next catch-up tries again.
        """
        for attempt in range(CATCH_UP_ATTEMPTS):
            try:
                return self.projector.catch_up(progress=progress)
            except Exception:
                # A failed page is forgotten by the projector; a busy or briefly unreachable
                # database usually lets the next attempt through.
                logger.exception("projection catch-up failed (attempt %d)", attempt + 1)
                time.sleep(0.01 * (attempt + 1))
        return 0

    def _read(self, name: str) -> ViewReaderBase:
        if self.embedded_projections:
            self.catch_up()
        else:
            self.projector.recheck_failures([name])
        runner = self.projector.runner(name)
        if runner.failure is not None:
            raise ProjectionStalledError(name, runner.failure)
        return self._reader

    def follow_up_queue(self, run_id: str) -> FollowUpQueue | None:
        return follow_up_queue.follow_up_queue(self._read("follow_up_queue"), run_id)

    def follow_up_queue_range(self, run_id: str, *, start: int, limit: int) -> FollowUpQueue | None:
        return follow_up_queue.follow_up_queue_range(
            self._read("follow_up_queue"), run_id, start=start, limit=limit
        )

    def terminal_data(self, run_id: str) -> TerminalData | None:
        return terminal_data.terminal_data(self._read("terminal_data"), run_id)

    def viewer_deltas(self, run_id: str, *, after_revision: int) -> ViewerDeltas | SnapshotRequired:
        return viewer_deltas.viewer_deltas(
            self._read("viewer_deltas"), run_id, after_revision=after_revision
        )

    def session_outbox(self, session_id: str) -> list[WorkflowMessageRecord]:
        return session_outbox.session_outbox(self._read("session_outbox"), session_id)

    def next_deliverable(self, session_id: str) -> WorkflowMessageRecord | None:
        return session_outbox.next_deliverable(self._read("session_outbox"), session_id)

    # -- settings and progress updates: explicit forwarders of the application's commands ---

    def ensure_settings_scope(
        self,
        run_id: str,
        *,
        mount_path: str = "",
        invocation: int = 1,
        settings: JsonValue,
        policy: dict[str, Any],
    ) -> SettingsScopeRecord:
        """The run's settings scope for a mount and invocation, created once (upstream §9.1)."""
        return super().ensure_settings_scope(
            run_id, mount_path=mount_path, invocation=invocation, settings=settings, policy=policy
        )

    def change_settings(
        self,
        run_id: str,
        scope_id: str,
        *,
        request_id: str,
        actor: Actor,
        source: str,
        patch: list[dict[str, Any]],
        expected_change_number: int | None = None,
    ) -> SettingsChange:
        """Apply an RFC 6902 patch to a scope under its policy (upstream §9.2)."""
        return super().change_settings(
            run_id,
            scope_id,
            request_id=request_id,
            actor=actor,
            source=source,
            patch=patch,
            expected_change_number=expected_change_number,
        )

    def publish_update(
        self,
        run_id: str,
        *,
        attempt_id: str,
        update_type: str,
        key: str,
        data: JsonValue,
    ) -> UpdateRecord:
        """Publish a progress update; the latest per (type, key) is current (upstream §3.9)."""
        return super().publish_update(
            run_id, attempt_id=attempt_id, update_type=update_type, key=key, data=data
        )

    def settings_scopes(self, run_id: str) -> list[SettingsScopeRecord]:
        """The settings scopes active on the run, by mount path and invocation."""
        return settings.settings_scopes(self._read("settings"), run_id)

    def settings_scope_at_change(
        self, scope_id: str, change_number: int
    ) -> SettingsScopeRecord | None:
        """The scope as it was right after ``change_number`` (0: as created)."""
        return settings.settings_scope_at_change(self._read("settings"), scope_id, change_number)

    def list_runs(
        self,
        *,
        status: str | None = None,
        session_id: str | None = None,
        root_run_id: str | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> RunPage:
        """Runs in creation order, filtered and keyset-paged (``after`` a run id)."""
        return runs.list_runs(
            self._read("runs"),
            status=status,
            session_id=session_id,
            root_run_id=root_run_id,
            after=after,
            limit=limit,
        )

    # -- operations -------------------------------------------------------------------------

    def projection_status(self) -> list[ProjectionStatus]:
        """Each projection's name, version, position, lag behind the log and last error."""
        if self.embedded_projections:
            self.catch_up()
        head = self.storage.max_position()
        known = {runner.name for runner in self.projector.runners.values()}
        return [
            ProjectionStatus(
                name=state.name,
                version=state.version,
                position=state.position,
                lag=max(0, head - state.position),
                last_error=state.last_error,
            )
            for state in self.views.tracking()
            if state.name in known
        ]

    def rebuild_projection(self, name: str, *, progress: Progress | None = None) -> int:
        """Drop the projection's view and replay the whole log into it; returns events read."""
        return self.projector.rebuild([name], progress=progress)

    def rebuild_projections(
        self,
        names: Sequence[str] | None = None,
        *,
        progress: Progress | None = None,
        processes: int = 1,
    ) -> int:
        """Rebuild several projections (default: all); returns the events replayed.

        With ``processes`` > 1 (SQLite and PostgreSQL) the projections are split over that
        many processes, each replaying the log into its group's tables. The processes are
        spawned, so a script calling this needs the usual ``if __name__ == "__main__":``.
        """
        chosen = list(names) if names else list(self.projector.runners)
        for name in chosen:
            self.projector.runner(name)
        workers = min(len(chosen), processes)
        if workers <= 1 or self.backend == "memory":
            return self.projector.rebuild(chosen, progress=progress)
        with self.projector.paused():
            read = rebuild_in_processes(rebuild_group, self.url, split(chosen, workers), progress)
            self.projector.reload(chosen)
        return read

    def close(self) -> None:
        # The library's Application.__del__ closes again; the second time there is nothing left.
        if self._closed:
            return
        self._closed = True
        self._closing.set()
        self._wake.set()
        if self._follower is not None:
            self._follower.join(timeout=30)
            # What the last commands wrote may not have reached the follower before it stopped.
            self.catch_up()
        super().close()
        self.views.close()
        self.storage.close()

    def __enter__(self) -> WorkflowStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc_val: BaseException | None,
        exc_tb: TracebackType | None,
    ) -> None:
        self.close()


def resolve_url(url: str | None, env: Mapping[str, str] | None = None) -> str:
    """The store URL: the given one, else ``RUNLEDGER_URL``, else the embedded default."""
    if url:
        return url
    environment = os.environ if env is None else env
    return environment.get(URL_VARIABLE) or DEFAULT_URL


def open_backend(url: str) -> tuple[EventStorage, ViewStore]:
    """The event storage and view store a URL names; tables are created on first use."""
    if url.startswith("sqlite:///"):
        from runledger.infrastructure.storage.sqlite import SQLiteStorage
        from runledger.infrastructure.views.sql import SQLiteViewStore

        path = url.removeprefix("sqlite:///")
        return SQLiteStorage(path), SQLiteViewStore(path)
    if url.startswith(("postgresql://", "postgres://")):
        from runledger.infrastructure.storage.postgres import PostgresStorage
        from runledger.infrastructure.views.sql import PostgresViewStore

        postgres = PostgresStorage(url)
        return postgres, PostgresViewStore(postgres.datastore)
    if url == "memory://":
        from runledger.infrastructure.storage.memory import MemoryStorage

        return MemoryStorage(), MemoryViewStore()
    raise InvalidStoreUrlError(url)


def open_store(
    url: str | None = None,
    *,
    clock: Clock = utc_now,
    env: Mapping[str, str] | None = None,
    embedded_projections: bool = True,
    projections: Sequence[str] | None = None,
) -> WorkflowStore:
    """Open the store at ``url`` (``sqlite:///file``, ``postgresql://…`` or ``memory://``).

    With ``embedded_projections`` (the default) read models catch up in this process after
    every command; without, a separate ``runledger projections run`` worker keeps them.
    ``projections`` limits the store to some read models (a rebuild process uses this so it
    never touches the tables of projections another process is rebuilding).
    """
    resolved = resolve_url(url, env)
    storage, views = open_backend(resolved)
    return WorkflowStore(
        storage,
        views,
        url=resolved,
        clock=clock,
        embedded_projections=embedded_projections,
        projections=projections,
    )


def rebuild_group(url: str, names: list[str], messages: Any) -> None:
    """Rebuild ``names`` in this (spawned) process, reporting on ``messages``."""
    try:
        with open_store(url, embedded_projections=False, projections=names) as store:
            read = store.projector.rebuild(names, progress=lambda n: messages.put(("page", n)))
        messages.put(("done", read))
    except BaseException as error:
        messages.put(("error", f"{type(error).__name__}: {error}"))
        raise


__all__: Sequence[str] = ["WorkflowStore", "default_projections", "open_store", "resolve_url"]
