"""The SettingsScope aggregate: one settings value of a run (or an included workflow) and
every accepted change to it (upstream §9.1-9.2).

Its version orders concurrent changes: two writers that start from the same change number
conflict on save, and the loser reloads and applies its patch to the winner's value.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar
from uuid import UUID

from eventsourcing.domain import BaseAggregate

from runledger.domain.canonical import check_plain_json, json_digest
from runledger.domain.errors import (
    SettingsRequestReusedError,
    SettingsScopeNotActiveError,
    SettingsScopeOfAnotherRunError,
    StaleSettingsError,
)
from runledger.domain.events import (
    CopiedCheaply,
    LedgerCreated,
    LedgerEvent,
    LedgerSnapshot,
    OwnsNestedEvents,
)
from runledger.domain.ids import aggregate_id
from runledger.domain.records import SettingsChangeRecord, SettingsScopeRecord
from runledger.domain.settings_policy import Policy, changed_paths, check_size, patched
from runledger.domain.values import Actor, JsonValue


def settings_aggregate_id(scope_id: str) -> UUID:
    return aggregate_id("settings", scope_id)


def settings_of_run_key(run_id: str) -> str:
    """The index key under which every scope that became active on ``run_id`` is found."""
    return f"settings-of:{run_id}"


class SettingsScope(CopiedCheaply, OwnsNestedEvents, BaseAggregate[UUID]):
    """A settings value with its policy, change number and the changes by request id."""

    TOPIC = "settings-scope"
    # Loads copy the request index: changes are recorded into it in place.
    MUTABLE_FIELDS: ClassVar[dict[str, Callable[[Any], Any]]] = {"changes": dict}

    scope_id: str
    origin_run_id: str
    created_run_id: str
    active_run_id: str
    mount_path: str
    invocation: int
    policy: Policy
    initial: JsonValue
    settings: JsonValue
    settings_hash: str
    change_number: int
    changes: dict[str, dict[str, Any]]

    def __init__(self) -> None:
        """State is set by the Created event."""

    class Event(LedgerEvent):
        pass

    class Created(Event, LedgerCreated):
        TOPIC = "settings.scope-created"
        scope_id: str
        origin_run_id: str
        mount_path: str
        invocation: int
        policy: Policy
        settings: JsonValue
        settings_hash: str

        def lookup_key(self) -> str | None:
            return settings_of_run_key(self.run_id)

        def apply(self, scope: SettingsScope) -> None:
            scope.scope_id = self.scope_id
            scope.origin_run_id = self.origin_run_id
            scope.created_run_id = self.run_id
            scope.active_run_id = self.run_id
            scope.mount_path = self.mount_path
            scope.invocation = self.invocation
            scope.policy = self.policy
            scope.initial = self.settings
            scope.settings = self.settings
            scope.settings_hash = self.settings_hash
            scope.change_number = 0
            scope.changes = {}

    class Changed(Event):
        """An accepted patch; it carries the value after it, so replay never re-patches."""

        TOPIC = "settings.changed"
        # Version 2 added ``changed_paths``: which settings a change wrote, so the settings
        # read model and an audit show it without re-reading every operation of the patch.
        class_version = 2
        scope_id: str
        request_id: str
        change_number: int
        source: str
        patch: list[dict[str, Any]]
        patch_digest: str
        before_hash: str
        after_hash: str
        settings: JsonValue
        changed_paths: list[str]

        @staticmethod
        def upcast_v1_v2(state: dict[str, Any]) -> None:
            """A version 1 change wrote what its (checked, stored) patch names."""
            state["changed_paths"] = changed_paths(state["patch"])

        def apply(self, scope: SettingsScope) -> None:
            scope.settings = self.settings
            scope.settings_hash = self.after_hash
            scope.change_number = self.change_number
            scope.changes[self.request_id] = {
                "change_number": self.change_number,
                "actor": self.actor,
                "source": self.source,
                "patch_digest": self.patch_digest,
                "before_hash": self.before_hash,
                "after_hash": self.after_hash,
                "accepted_at": self.timestamp.isoformat(),
            }

    class Moved(Event):
        """The scope went with its run to a continuation child (upstream §3.6)."""

        TOPIC = "settings.scope-moved"
        scope_id: str
        from_run_id: str
        mount_path: str
        invocation: int
        change_number: int
        settings_hash: str

        def lookup_key(self) -> str | None:
            return settings_of_run_key(self.run_id)

        def apply(self, scope: SettingsScope) -> None:
            scope.active_run_id = self.run_id

    class Snapshot(LedgerSnapshot):
        TOPIC = "settings-scope.snapshot"

    # -- commands -------------------------------------------------------------------------

    @classmethod
    def create(
        cls,
        scope_id: str,
        *,
        run_id: str,
        origin_run_id: str,
        mount_path: str,
        invocation: int,
        policy: Policy,
        settings: JsonValue,
        actor: Actor,
        now: datetime,
    ) -> SettingsScope:
        check_plain_json(settings, "settings")
        check_size(policy, settings)
        return cls._create(
            cls.Created,
            id=settings_aggregate_id(scope_id),
            timestamp=now,
            actor=actor.to_json(),
            run_id=run_id,
            scope_id=scope_id,
            origin_run_id=origin_run_id,
            mount_path=mount_path,
            invocation=invocation,
            policy=policy,
            settings=settings,
            settings_hash=json_digest(settings),
        )

    def check_ensured_by(self, run_id: str) -> None:
        if self.active_run_id != run_id:
            raise SettingsScopeOfAnotherRunError(self.scope_id)

    def prior_change(
        self, request_id: str, *, patch_digest: str, actor: Actor, source: str
    ) -> SettingsChangeRecord | None:
        """The change this request already made; the same id with other content is refused."""
        prior = self.changes.get(request_id)
        if prior is None:
            return None
        if (
            prior["patch_digest"] != patch_digest
            or Actor.from_json(prior["actor"]) != actor
            or prior["source"] != source
        ):
            raise SettingsRequestReusedError()
        return self._change_record(request_id, prior)

    def check_active_for(self, run_id: object) -> None:
        if self.active_run_id != run_id:
            raise SettingsScopeNotActiveError(run_id)

    def check_expected(self, expected_change_number: int | None) -> None:
        if expected_change_number is not None and expected_change_number != self.change_number:
            raise StaleSettingsError(expected=expected_change_number, current=self.change_number)

    def change(
        self,
        request_id: str,
        *,
        patch: list[dict[str, Any]],
        patch_digest: str,
        actor: Actor,
        source: str,
        now: datetime,
    ) -> SettingsChangeRecord:
        """Apply an authorised patch as the next change number."""
        after = patched(self.policy, actor.type, self.settings, patch)
        self.trigger_event(
            self.Changed,
            timestamp=now,
            actor=actor.to_json(),
            run_id=self.active_run_id,
            scope_id=self.scope_id,
            request_id=request_id,
            change_number=self.change_number + 1,
            source=source,
            patch=patch,
            patch_digest=patch_digest,
            before_hash=self.settings_hash,
            after_hash=json_digest(after),
            settings=after,
            changed_paths=changed_paths(patch),
        )
        return self._change_record(request_id, self.changes[request_id])

    def move_to(self, run_id: str, *, actor: Actor, now: datetime) -> None:
        self.trigger_event(
            self.Moved,
            timestamp=now,
            actor=actor.to_json(),
            run_id=run_id,
            scope_id=self.scope_id,
            from_run_id=self.active_run_id,
            mount_path=self.mount_path,
            invocation=self.invocation,
            change_number=self.change_number,
            settings_hash=self.settings_hash,
        )

    # -- records --------------------------------------------------------------------------

    def _change_record(self, request_id: str, change: dict[str, Any]) -> SettingsChangeRecord:
        return SettingsChangeRecord(
            scope_id=self.scope_id,
            request_id=request_id,
            change_number=change["change_number"],
            actor=Actor.from_json(change["actor"]),
            source=change["source"],
            patch_digest=change["patch_digest"],
            before_hash=change["before_hash"],
            after_hash=change["after_hash"],
            accepted_at=datetime.fromisoformat(change["accepted_at"]),
        )

    def to_record(self) -> SettingsScopeRecord:
        return SettingsScopeRecord(
            scope_id=self.scope_id,
            origin_run_id=self.origin_run_id,
            active_run_id=self.active_run_id,
            mount_path=self.mount_path,
            invocation=self.invocation,
            change_number=self.change_number,
            settings=self.settings,
            settings_hash=self.settings_hash,
            policy=self.policy,
            created_at=self.created_on,
            updated_at=self.modified_on,
        )
