"""Run leases and write fencing through the store, on every backend (upstream §3.10, §8.3,
§11 H2-H5; decisions 16, 22, 26)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from runledger.domain.errors import (
    ClaimLostError,
    InvalidClaimError,
    InvalidLeaseOwnerError,
    LeaseDurationError,
    LeaseNotCurrentError,
    RunMissingError,
)
from runledger.domain.records import RunClaim
from runledger.infrastructure.runtime import StoreRuntime, open_runtime
from runledger.infrastructure.store import WorkflowStore
from tests.support.assertions import assert_rejected, payload_fields, recording, whole_log
from tests.support.clock import FakeClock
from tests.support.scenario import RUN, create, running_run

SECOND = timedelta(seconds=1)
BINDING = {
    "schema": "pi-workflows.session-binding.v1",
    "runId": RUN,
    "piSessionId": "session-1",
    "boundAt": "2026-01-01T00:00:00.000Z",
}


def claim(store: WorkflowStore, owner_id: str = "worker-1", lease_ms: int = 10_000) -> RunClaim:
    claimed = store.claim_run(RUN, owner_type="controller", owner_id=owner_id, lease_ms=lease_ms)
    assert claimed is not None
    return claimed


# -- H2: claim ------------------------------------------------------------------------------


def test_h2_a_run_held_by_another_owner_cannot_be_claimed_until_the_lease_expires(
    store: WorkflowStore, clock: FakeClock
) -> None:
    create(store)
    first = claim(store, "worker-1", lease_ms=10_000)
    assert store.claim_run(RUN, owner_type="controller", owner_id="worker-2") is None
    clock.advance(10 * SECOND)
    with recording(store) as recorded:
        second = claim(store, "worker-2")
    assert second.generation == first.generation + 1
    assert recorded.wire_names == ["run.claimed"]
    assert payload_fields(recorded.events[0], {"owner_id": "worker-2", "generation": 2}) == {
        "owner_id": "worker-2",
        "generation": 2,
    }


def test_the_same_owner_cannot_claim_its_own_live_lease_again(store: WorkflowStore) -> None:
    create(store)
    claim(store)
    assert store.claim_run(RUN, owner_type="controller", owner_id="worker-1") is None


def test_the_claim_event_stores_the_token_hash_never_the_token(store: WorkflowStore) -> None:
    create(store)
    claimed = claim(store)
    stored = [event for event in whole_log(store) if event.wire_name == "run.claimed"]
    assert len(stored) == 1
    assert claimed.token not in repr(stored[0].payload)
    assert len(stored[0].payload["token_hash"]) == 64


def test_renewing_extends_the_lease_and_keeps_the_token(
    store: WorkflowStore, clock: FakeClock
) -> None:
    create(store)
    claimed = claim(store, lease_ms=1000)
    clock.advance(SECOND / 2)
    renewed = store.renew_claim(claimed, lease_ms=5000)
    assert (renewed.token, renewed.generation) == (claimed.token, claimed.generation)
    assert renewed.expires_at > claimed.expires_at
    clock.advance(2 * SECOND)
    assert store.claim_run(RUN, owner_type="controller", owner_id="worker-2") is None


def test_renewing_an_expired_claim_is_refused(store: WorkflowStore, clock: FakeClock) -> None:
    create(store)
    claimed = claim(store, lease_ms=1000)
    clock.advance(2 * SECOND)
    assert_rejected(
        store, LeaseNotCurrentError, "Lease is no longer current", store.renew_claim, claimed
    )


def test_a_released_run_can_be_claimed_at_once_and_the_old_claim_is_stale(
    store: WorkflowStore,
) -> None:
    create(store)
    first = claim(store)
    store.release_claim(first)
    second = claim(store, "worker-2")
    assert second.generation == 2
    assert_rejected(
        store, LeaseNotCurrentError, "Lease is no longer current", store.release_claim, first
    )


# -- H3: fencing ----------------------------------------------------------------------------


def test_h3_a_claimed_run_refuses_a_write_without_authority(store: WorkflowStore) -> None:
    running_run(store)
    claim(store)
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost (missingAuthority): {RUN}",
        store.record_progress,
        RUN,
        status="waiting",
        waiting_on="ask",
    )


def test_h3_a_write_with_an_expired_claim_is_fenced(store: WorkflowStore, clock: FakeClock) -> None:
    running_run(store)
    claimed = claim(store, lease_ms=1000)
    clock.advance(2 * SECOND)
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost (expired): {RUN}",
        store.finish_run,
        RUN,
        status="completed",
        authority=claimed,
    )


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({"token": "another-token"}, "tokenChanged"),
        ({"generation": 9}, "generationChanged"),
        ({"owner_id": "worker-9"}, "ownerChanged"),
    ],
)
def test_h3_a_write_with_a_changed_claim_is_fenced_with_its_reason(
    store: WorkflowStore, changes: dict[str, Any], reason: str
) -> None:
    running_run(store)
    forged = claim(store).model_copy(update=changes)
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost ({reason}): {RUN}",
        store.pause_run,
        RUN,
        authority=forged,
    )


def test_a_worker_whose_lease_was_taken_over_is_fenced_by_generation_or_owner(
    store: WorkflowStore, clock: FakeClock
) -> None:
    running_run(store)
    old = claim(store, "worker-1", lease_ms=1000)
    clock.advance(2 * SECOND)
    claim(store, "worker-2")
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost (ownerChanged): {RUN}",
        store.record_progress,
        RUN,
        status="running",
        current_node="next",
        authority=old,
    )


FencedCommand = Callable[[WorkflowStore, RunClaim | None], object]
FENCED: dict[str, FencedCommand] = {
    "record_progress": lambda s, a: s.record_progress(RUN, status="running", authority=a),
    "pause_run": lambda s, a: s.pause_run(RUN, authority=a),
    "resume_run": lambda s, a: s.resume_run(RUN, authority=a),
    "set_presentation_instructions": lambda s, a: s.set_presentation_instructions(
        RUN, "Be brief.", authority=a
    ),
    "finish_run": lambda s, a: s.finish_run(RUN, status="completed", authority=a),
    "interrupt_run": lambda s, a: s.interrupt_run(RUN, authority=a),
    "record_session_binding": lambda s, a: s.record_session_binding(RUN, BINDING, authority=a),
    "reserve_effect": lambda s, a: s.reserve_effect(
        RUN, effect_type="email", key="k", request={}, authority=a
    ),
    "publish_update": lambda s, a: s.publish_update(
        RUN, attempt_id="attempt-1", update_type="progress", key="step", data=1, authority=a
    ),
}


def paused_run(store: WorkflowStore) -> None:
    """A running run paused with a detail: every fenced command above changes something."""
    running_run(store)
    store.pause_run(RUN, status_detail="held")


@pytest.mark.parametrize("name", list(FENCED))
def test_every_fenced_command_refuses_a_claimed_run_without_authority(
    store: WorkflowStore, name: str
) -> None:
    running_run(store)
    claim(store)
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost (missingAuthority): {RUN}",
        FENCED[name],
        store,
        None,
    )


@pytest.mark.parametrize("name", list(FENCED))
def test_every_fenced_command_accepts_the_live_claim_and_renews_it(
    store: WorkflowStore, name: str
) -> None:
    paused_run(store)
    claimed = claim(store)
    with recording(store) as recorded:
        FENCED[name](store, claimed)
    assert recorded.wire_names[0] == "run.claim-renewed"
    assert len(recorded.wire_names) > 1


@pytest.mark.parametrize("name", list(FENCED))
def test_every_fenced_command_works_without_authority_on_an_unclaimed_run(
    store: WorkflowStore, name: str
) -> None:
    paused_run(store)
    with recording(store) as recorded:
        FENCED[name](store, None)
    assert "run.claim-renewed" not in recorded.wire_names
    assert recorded.wire_names


# -- H4: two stores -------------------------------------------------------------------------


def test_h4_two_stores_that_loaded_an_unclaimed_run_lose_neither_write(
    store: WorkflowStore, second_store: WorkflowStore
) -> None:
    running_run(store)
    assert second_store.get_run(RUN) is not None  # both stores now hold the run at one version
    store.pause_run(RUN, status_detail="by A")
    second_store.record_progress(RUN, status="waiting", waiting_on="ask")
    run = store.get_run(RUN)
    assert run is not None
    assert (run.paused, run.status_detail, run.status) == (True, None, "waiting")
    names = [event.wire_name for event in whole_log(store)]
    assert names[-2:] == ["run.paused", "run.progressed"]


def test_h4_the_second_store_writing_after_a_claim_is_fenced_not_applied(
    store: WorkflowStore, second_store: WorkflowStore
) -> None:
    running_run(store)
    assert second_store.get_run(RUN) is not None
    claimed = claim(store)
    store.record_progress(RUN, status="waiting", waiting_on="ask", authority=claimed)
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost (missingAuthority): {RUN}",
        second_store.finish_run,
        RUN,
        status="failed",
        error="stale writer",
    )
    run = store.get_run(RUN)
    assert run is not None
    assert run.status == "waiting"


def test_h4_a_stale_worker_in_another_store_is_fenced_after_the_takeover(
    store: WorkflowStore, second_store: WorkflowStore, clock: FakeClock
) -> None:
    running_run(store)
    old = claim(store, "worker-1", lease_ms=1000)
    second_store.record_progress(RUN, status="running", current_node="a", authority=old)
    clock.advance(2 * SECOND)
    new = second_store.claim_run(RUN, owner_type="controller", owner_id="worker-1")
    assert new is not None
    assert new.generation == 2
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost (tokenChanged): {RUN}",
        store.record_progress,
        RUN,
        status="running",
        current_node="b",
        authority=old,
    )


# -- H5: host session recording -------------------------------------------------------------


def test_h5_without_the_flag_the_host_cannot_record_a_session_of_a_claimed_run(
    store: WorkflowStore,
) -> None:
    create(store)
    claim(store)
    assert_rejected(
        store,
        ClaimLostError,
        f"Workflow run claim lost (missingAuthority): {RUN}",
        store.record_session_binding,
        RUN,
        BINDING,
    )


def test_h5_with_the_flag_the_host_records_a_session_of_a_run_a_worker_holds(
    store_url: str, runtime: StoreRuntime, clock: FakeClock
) -> None:
    host = WorkflowStore(runtime)
    create(host)
    claim(host)
    recorder = (
        StoreRuntime(
            runtime.storage,
            runtime.views,
            url=store_url,
            clock=clock,
            embedded_projections=False,
            allow_host_session_recording=True,
        )
        if store_url == "memory://"
        else open_runtime(store_url, clock=clock, allow_host_session_recording=True)
    )
    try:
        with recording(host) as recorded:
            segment = WorkflowStore(recorder).record_session_binding(RUN, BINDING)
    finally:
        if store_url != "memory://":
            recorder.close()
    assert segment.status == "recording"
    # The run binding is inserted or ignored; the segment records the binding itself.
    assert recorded.wire_names == ["run.session-bound", "session.segment-created"]
    run = host.get_run(RUN)
    assert run is not None
    assert run.origin_session_id == "session-1"


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("lease_ms", [0, -5, 2.5, True, "1000", None])
def test_claiming_with_a_bad_duration_is_refused_and_writes_nothing(
    store: WorkflowStore, lease_ms: object
) -> None:
    create(store)
    assert_rejected(
        store,
        LeaseDurationError,
        "Lease duration must be a positive integer",
        store.claim_run,
        RUN,
        owner_type="controller",
        owner_id="worker-1",
        lease_ms=lease_ms,
    )


def test_renewing_with_a_bad_duration_is_refused(store: WorkflowStore) -> None:
    create(store)
    claimed = claim(store)
    assert_rejected(
        store,
        LeaseDurationError,
        "Lease duration must be a positive integer",
        store.renew_claim,
        claimed,
        lease_ms=0,
    )


@pytest.mark.parametrize(
    ("owner_type", "owner_id"), [("robot", "w"), ("controller", ""), (None, None)]
)
def test_claiming_with_a_bad_owner_is_refused(
    store: WorkflowStore, owner_type: object, owner_id: object
) -> None:
    create(store)
    with pytest.raises(InvalidLeaseOwnerError):
        store.claim_run(RUN, owner_type=owner_type, owner_id=owner_id)  # type: ignore[arg-type]
    assert [event.wire_name for event in whole_log(store)] == ["run.created"]


def test_claiming_a_missing_run_is_refused(store: WorkflowStore) -> None:
    assert_rejected(
        store,
        RunMissingError,
        "Workflow run is missing: nope",
        store.claim_run,
        "nope",
        owner_type="controller",
        owner_id="worker-1",
    )


@pytest.mark.parametrize("authority", ["token", {"token": "t"}, 7])
def test_a_fenced_command_refuses_an_authority_that_is_not_a_claim(
    store: WorkflowStore, authority: object
) -> None:
    running_run(store)
    assert_rejected(
        store,
        InvalidClaimError,
        "Workflow run claim must be a RunClaim returned by claim_run",
        store.pause_run,
        RUN,
        authority=authority,
    )
