"""The settings commands' rules across a run and its scopes (upstream §9.1-9.2, in order).

A scope's own rules live on ``SettingsScope`` and the pure policy and patch rules in
``settings_policy``; these functions decide in which order they meet the run's. The hand-over
of scopes to a continuation child is part of creating the child (``lineage``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Final

from runledger.domain.aggregates import Aggregates
from runledger.domain.arguments import check_argument
from runledger.domain.canonical import json_digest
from runledger.domain.lineage import continuation_origin
from runledger.domain.records import SettingsChange
from runledger.domain.settings_policy import Policy, settings_scope_id
from runledger.domain.settings_scopes import SettingsScope, settings_aggregate_id
from runledger.domain.values import Actor, JsonValue

SETTINGS_ATTEMPTS: Final = 8
"""Upstream §9.2 step 2: a change without an expected number is tried at most this often."""


def ensure_settings_scope(
    aggregates: Aggregates,
    run_id: str,
    *,
    mount_path: str,
    invocation: int,
    settings: JsonValue,
    policy: Policy,
    actor: Actor,
    now: datetime,
) -> SettingsScope:
    """The run's scope for a mount and invocation: the existing one, or a new one (§9.1).

    ``mount_path``, ``invocation`` and ``policy`` have passed their checks.
    """
    run = aggregates.run(run_id)
    run.check_running()
    origin = continuation_origin(run, aggregates)
    scope_id = settings_scope_id(origin.run_id, mount_path, invocation)
    existing = aggregates.get(SettingsScope, settings_aggregate_id(scope_id))
    if existing is not None:
        existing.check_ensured_by(run.run_id)
        return existing
    aggregates.guard_settings_of(run)
    scope = SettingsScope.create(
        scope_id,
        run_id=run.run_id,
        origin_run_id=origin.run_id,
        mount_path=mount_path,
        invocation=invocation,
        policy=policy,
        settings=settings,
        actor=actor,
        now=now,
    )
    return aggregates.add(scope)


def change_settings(
    aggregates: Aggregates,
    run_id: str,
    scope_id: str,
    *,
    request_id: str,
    patch: list[dict[str, Any]],
    actor: Actor,
    source: str,
    expected_change_number: int | None,
    now: datetime,
) -> SettingsChange:
    """Apply a checked RFC 6902 patch to the scope, or adopt the request's earlier change.

    Upstream §9.2 step 2 in order: a prior change of the request id (answered even after the
    run ended), the scope active for the run, the run running or waiting, the expected change
    number, then the policy and size (``SettingsScope.change``).
    """
    scope = aggregates.settings_scope(scope_id)
    patch_digest = json_digest(patch)
    prior = scope.prior_change(request_id, patch_digest=patch_digest, actor=actor, source=source)
    if prior is not None:
        return SettingsChange(scope=scope.to_record(), change=prior, adopted=True)
    scope.check_active_for(run_id)
    aggregates.run(run_id).check_accepts_changes()
    scope.check_expected(expected_change_number)
    change = scope.change(
        request_id,
        patch=patch,
        patch_digest=patch_digest,
        actor=actor,
        source=source,
        now=now,
    )
    # The store's limits on the stored patch, once upstream's checks passed (decision 28).
    check_argument("patch", patch)
    return SettingsChange(scope=scope.to_record(), change=change, adopted=False)
