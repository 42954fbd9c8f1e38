"""The settings read model: every scope with its current value, and each change's result.

Upstream §9.1 ``listSettingsScopes`` and ``getSettingsScopeAtChange``. Each accepted change
keeps the value after it, so reading a scope as of change n is one keyed read however many
changes the scope has, never a replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any, ClassVar, Final

from runledger.domain.canonical import json_digest
from runledger.domain.errors import SettingsChangeMissingError
from runledger.domain.records import SettingsScopeRecord
from runledger.domain.settings_policy import check_change_number
from runledger.domain.settings_scopes import SettingsScope
from runledger.projections.base import (
    HandledProjection,
    Handler,
    ProjectedEvent,
    Row,
    Table,
    ViewReader,
    ViewWriter,
)

SCOPES: Final = Table(
    name="rl_set_scopes",
    columns=(
        ("scope_id", "text"),
        ("origin_run_id", "text"),
        ("created_run_id", "text"),
        ("active_run_id", "text"),
        ("mount_path", "text"),
        ("invocation", "int"),
        ("policy", "json"),
        ("initial", "json"),
        ("settings", "json"),
        ("settings_hash", "text"),
        ("change_number", "int"),
        ("created_at", "text"),
        ("updated_at", "text"),
    ),
    key=("scope_id",),
    indexes=(("active_run_id",),),
    # A scope belongs to the run it is active on (it only ever moves within a tree).
    owner="active_run_id",
)

CHANGES: Final = Table(
    name="rl_set_changes",
    columns=(
        ("scope_id", "text"),
        ("change_number", "int"),
        ("request_id", "text"),
        ("run_id", "text"),
        ("actor_type", "text"),
        ("actor_id", "text"),
        ("source", "text"),
        ("patch_digest", "text"),
        ("before_hash", "text"),
        ("after_hash", "text"),
        ("settings", "json"),
        ("changed_paths", "json"),
        ("accepted_at", "text"),
    ),
    key=("scope_id", "change_number"),
    owner="run_id",
    # Appended once per change; only queries read them.
    cached=False,
)
"""One row per accepted change, with the value after it (``settings``) and the JSON pointers
it wrote (``changed_paths``, from ``settings.changed`` version 2)."""


def _scope_created(event: ProjectedEvent, view: ViewWriter) -> None:
    view.put(
        SCOPES,
        {
            "scope_id": event["scope_id"],
            "origin_run_id": event["origin_run_id"],
            "created_run_id": event["run_id"],
            "active_run_id": event["run_id"],
            "mount_path": event["mount_path"],
            "invocation": event["invocation"],
            "policy": event["policy"],
            "initial": event["settings"],
            "settings": event["settings"],
            "settings_hash": event["settings_hash"],
            "change_number": 0,
            "created_at": event.recorded_at,
            "updated_at": event.recorded_at,
        },
    )


def _settings_changed(event: ProjectedEvent, view: ViewWriter) -> None:
    scope = view.get(SCOPES, (event["scope_id"],))
    if scope is None:
        return
    scope["settings"] = event["settings"]
    scope["settings_hash"] = event["after_hash"]
    scope["change_number"] = event["change_number"]
    scope["updated_at"] = event.recorded_at
    view.put(SCOPES, scope)
    actor = event["actor"]
    view.put(
        CHANGES,
        {
            "scope_id": event["scope_id"],
            "change_number": event["change_number"],
            "request_id": event["request_id"],
            "run_id": event["run_id"],
            "actor_type": actor["type"],
            "actor_id": actor.get("id"),
            "source": event["source"],
            "patch_digest": event["patch_digest"],
            "before_hash": event["before_hash"],
            "after_hash": event["after_hash"],
            "settings": event["settings"],
            "changed_paths": event["changed_paths"],
            "accepted_at": event.recorded_at,
        },
    )


def _scope_moved(event: ProjectedEvent, view: ViewWriter) -> None:
    scope = view.get(SCOPES, (event["scope_id"],))
    if scope is None:
        return
    scope["active_run_id"] = event["run_id"]
    scope["updated_at"] = event.recorded_at
    view.put(SCOPES, scope)


_HANDLERS: Final[dict[str, Handler]] = {
    SettingsScope.Created.TOPIC: _scope_created,
    SettingsScope.Changed.TOPIC: _settings_changed,
    SettingsScope.Moved.TOPIC: _scope_moved,
}


class SettingsProjection(HandledProjection):
    """Projects settings scopes by active run, and every change's resulting value."""

    name: ClassVar[str] = "settings"
    # Version 2 keeps each change's changed paths.
    version: ClassVar[int] = 2
    tables: ClassVar[Sequence[Table]] = (SCOPES, CHANGES)
    handlers = _HANDLERS


def settings_scopes(reader: ViewReader, run_id: str) -> list[SettingsScopeRecord]:
    """The scopes active on the run, ordered by (mount path, invocation) as upstream."""
    if not isinstance(run_id, str):
        return []
    rows = reader.scan(SCOPES, equals={"active_run_id": run_id})
    # Sorted here, by code point as upstream's binary collation, not by the database's.
    rows.sort(key=lambda row: (row["mount_path"], row["invocation"]))
    return [_record(row) for row in rows]


def settings_scope_at_change(
    reader: ViewReader, scope_id: str, change_number: int
) -> SettingsScopeRecord | None:
    """The scope as it was right after ``change_number`` (0: as created); None if unknown."""
    number = check_change_number(change_number)
    if not isinstance(scope_id, str):
        return None
    scope = reader.get(SCOPES, (scope_id,))
    if scope is None:
        return None
    if number > scope["change_number"]:
        raise SettingsChangeMissingError(change_number=number, scope_id=scope_id)
    if number == scope["change_number"]:
        return _record(scope)
    if number == 0:
        return _record(
            scope,
            active_run_id=scope["created_run_id"],
            change_number=0,
            settings=scope["initial"],
            settings_hash=json_digest(scope["initial"]),
            updated_at=scope["created_at"],
        )
    change = reader.get(CHANGES, (scope_id, number))
    if change is None:
        raise SettingsChangeMissingError(change_number=number, scope_id=scope_id)
    return _record(
        scope,
        active_run_id=change["run_id"],
        change_number=number,
        settings=change["settings"],
        settings_hash=change["after_hash"],
        updated_at=change["accepted_at"],
    )


def _record(row: Row, **as_of: Any) -> SettingsScopeRecord:
    fields = {**row, **as_of}
    return SettingsScopeRecord(
        scope_id=fields["scope_id"],
        origin_run_id=fields["origin_run_id"],
        active_run_id=fields["active_run_id"],
        mount_path=fields["mount_path"],
        invocation=fields["invocation"],
        change_number=fields["change_number"],
        settings=fields["settings"],
        settings_hash=fields["settings_hash"],
        policy=fields["policy"],
        created_at=datetime.fromisoformat(fields["created_at"]),
        updated_at=datetime.fromisoformat(fields["updated_at"]),
    )
