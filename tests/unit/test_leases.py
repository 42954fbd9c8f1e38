"""Rules of the run lease on the Run aggregate (upstream §3.10, §8.3; decisions 16, 22, 26)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from runledger.domain.canonical import sha256hex
from runledger.domain.errors import (
    AuthorityLeaseDurationError,
    ClaimLostError,
    InvalidClaimError,
    InvalidLeaseOwnerError,
    LeaseDurationError,
    LeaseNotCurrentError,
    LeaseOfAnotherRunError,
    LeaseTooLongError,
)
from runledger.domain.leases import MAX_LEASE_MS, check_authority, check_lease_ms, check_owner
from runledger.domain.records import RunClaim
from runledger.domain.runs import Run
from runledger.domain.values import Actor
from tests.support.specification import Event, events_of, given

NOW = datetime(2026, 1, 1, tzinfo=UTC)
WORKER = Actor("controller", "worker-1")
OTHER = Actor("controller", "worker-2")
TOKEN = "token-1"


def new_run() -> Run:
    return Run.create(
        "run-1",
        workflow_name="echo",
        input={},
        workflow_ref=None,
        title=None,
        status="running",
        parent=None,
        lineage_kind=None,
        parent_terminal_fingerprint=None,
        actor=Actor("host"),
        now=NOW,
    )


def claimed_history(lease_ms: int = 1000, owner: Actor = WORKER) -> list[Event]:
    return events_of(
        new_run(), lambda run: run.claim(owner, token=TOKEN, lease_ms=lease_ms, now=NOW)
    )


def claim_of(**changes: object) -> RunClaim:
    fields: dict[str, object] = {
        "run_id": "run-1",
        "owner_type": "controller",
        "owner_id": "worker-1",
        "token": TOKEN,
        "generation": 1,
        "expires_at": NOW + timedelta(seconds=1),
        "lease_ms": 1000,
    }
    fields.update(changes)
    return RunClaim.model_validate(fields)


def test_a_claim_stores_only_the_token_hash_and_the_next_generation() -> None:
    given(Run, events_of(new_run())).when(
        lambda run: run.claim(WORKER, token=TOKEN, lease_ms=1000, now=NOW)
    ).then(
        [
            (
                "run.claimed",
                {
                    "owner_type": "controller",
                    "owner_id": "worker-1",
                    "generation": 1,
                    "token_hash": sha256hex(TOKEN),
                    "lease_ms": 1000,
                    "expires_at": "2026-01-01T00:00:01+00:00",
                    "actor": {"type": "controller", "id": "worker-1"},
                },
            )
        ]
    )


def test_a_claim_returns_the_token_once_with_the_lease() -> None:
    claim = new_run().claim(WORKER, token=TOKEN, lease_ms=1000, now=NOW)
    assert claim == claim_of()


@pytest.mark.parametrize("owner", [WORKER, OTHER], ids=["same owner", "another owner"])
def test_no_one_claims_a_run_while_a_live_lease_exists(owner: Actor) -> None:
    spec = given(Run, claimed_history()).when(
        lambda run: run.claim(owner, token="token-2", lease_ms=1000, now=NOW)
    )
    spec.then([])
    assert spec.result is None


def test_anyone_claims_an_expired_lease_with_the_next_generation() -> None:
    later = NOW + timedelta(seconds=1)
    given(Run, claimed_history()).when(
        lambda run: run.claim(OTHER, token="token-2", lease_ms=1000, now=later)
    ).then([("run.claimed", {"owner_id": "worker-2", "generation": 2})])


def test_a_released_lease_keeps_its_generation_for_the_next_claim() -> None:
    history = events_of(
        new_run(),
        lambda run: run.claim(WORKER, token=TOKEN, lease_ms=1000, now=NOW),
        lambda run: run.release_claim(claim_of(), now=NOW),
    )
    given(Run, history).when(
        lambda run: run.claim(OTHER, token="token-2", lease_ms=1000, now=NOW)
    ).then([("run.claimed", {"generation": 2})])


def test_renewing_extends_the_lease_from_now() -> None:
    later = NOW + timedelta(milliseconds=500)
    given(Run, claimed_history()).when(
        lambda run: run.renew_claim(claim_of(), lease_ms=2000, now=later)
    ).then(
        [("run.claim-renewed", {"generation": 1, "expires_at": "2026-01-01T00:00:02.500000+00:00"})]
    )


@pytest.mark.parametrize(
    ("claim", "at"),
    [
        (claim_of(), NOW + timedelta(seconds=1)),
        (claim_of(token="other"), NOW),
        (claim_of(generation=2), NOW),
        (claim_of(owner_id="worker-2"), NOW),
    ],
    ids=["expired", "another token", "another generation", "another owner"],
)
def test_renewing_a_claim_that_is_not_the_live_lease_is_refused(
    claim: RunClaim, at: datetime
) -> None:
    given(Run, claimed_history()).when(
        lambda run: run.renew_claim(claim, lease_ms=1000, now=at)
    ).then_raises(LeaseNotCurrentError, "Lease is no longer current")


def test_the_holder_releases_its_lease_even_after_it_expired() -> None:
    later = NOW + timedelta(minutes=5)
    given(Run, claimed_history()).when(lambda run: run.release_claim(claim_of(), now=later)).then(
        [("run.claim-released", {"generation": 1})]
    )


@pytest.mark.parametrize(
    "claim",
    [claim_of(token="other"), claim_of(generation=2), claim_of(owner_id="worker-2")],
    ids=["another token", "another generation", "another owner"],
)
def test_releasing_a_claim_that_is_not_current_is_refused(claim: RunClaim) -> None:
    given(Run, claimed_history()).when(lambda run: run.release_claim(claim, now=NOW)).then_raises(
        LeaseNotCurrentError, "Lease is no longer current"
    )


def test_releasing_twice_is_refused() -> None:
    history = events_of(
        new_run(),
        lambda run: run.claim(WORKER, token=TOKEN, lease_ms=1000, now=NOW),
        lambda run: run.release_claim(claim_of(), now=NOW),
    )
    given(Run, history).when(lambda run: run.release_claim(claim_of(), now=NOW)).then_raises(
        LeaseNotCurrentError, "Lease is no longer current"
    )


# -- fencing: upstream assertWriteAuthority --------------------------------------------------


def test_a_run_nobody_claimed_takes_writes_without_authority() -> None:
    given(Run, events_of(new_run())).when(lambda run: run.fence(None, now=NOW)).then([])


def test_a_claimed_run_refuses_a_write_without_authority() -> None:
    given(Run, claimed_history()).when(lambda run: run.fence(None, now=NOW)).then_raises(
        ClaimLostError, "Workflow run claim lost (missingAuthority): run-1"
    )


@pytest.mark.parametrize(
    ("authority", "at", "reason"),
    [
        (claim_of(), NOW + timedelta(seconds=1), "expired"),
        (claim_of(owner_id="worker-2"), NOW, "ownerChanged"),
        (claim_of(token="other"), NOW, "tokenChanged"),
        (claim_of(generation=7), NOW, "generationChanged"),
        # Upstream's order: an expired lease is reported before anything else differs.
        (claim_of(owner_id="worker-2", token="x"), NOW + timedelta(seconds=2), "expired"),
        (claim_of(token="other", generation=7), NOW, "tokenChanged"),
    ],
)
def test_a_write_whose_claim_was_lost_is_fenced_with_the_reason(
    authority: RunClaim, at: datetime, reason: str
) -> None:
    given(Run, claimed_history()).when(lambda run: run.fence(authority, now=at)).then_raises(
        ClaimLostError, f"Workflow run claim lost ({reason}): run-1"
    )


def test_a_stale_authority_on_a_released_run_is_fenced_as_expired() -> None:
    history = events_of(
        new_run(),
        lambda run: run.claim(WORKER, token=TOKEN, lease_ms=1000, now=NOW),
        lambda run: run.release_claim(claim_of(), now=NOW),
    )
    given(Run, history).when(lambda run: run.fence(claim_of(), now=NOW)).then_raises(
        ClaimLostError, "Workflow run claim lost (expired): run-1"
    )


def test_an_authority_of_another_run_is_refused() -> None:
    given(Run, claimed_history()).when(
        lambda run: run.fence(claim_of(run_id="run-2"), now=NOW)
    ).then_raises(LeaseOfAnotherRunError, "Lease does not belong to the mutation resource")


def test_a_write_with_the_live_claim_renews_the_lease_by_its_duration() -> None:
    later = NOW + timedelta(milliseconds=400)
    given(Run, claimed_history()).when(lambda run: run.fence(claim_of(), now=later)).then(
        [("run.claim-renewed", {"expires_at": "2026-01-01T00:00:01.400000+00:00"})]
    )


def test_an_authority_whose_duration_is_not_positive_is_refused() -> None:
    authority = claim_of(lease_ms=0)
    given(Run, claimed_history()).when(lambda run: run.fence(authority, now=NOW)).then_raises(
        AuthorityLeaseDurationError,
        "Workflow run authority lease duration must be a positive integer",
    )


# -- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("lease_ms", [0, -1, 1.5, True, "30000", None])
def test_a_lease_duration_must_be_a_positive_integer(lease_ms: object) -> None:
    with pytest.raises(LeaseDurationError) as caught:
        check_lease_ms(lease_ms)
    assert str(caught.value) == "Lease duration must be a positive integer"


@pytest.mark.parametrize(
    ("owner_type", "owner_id"),
    [("robot", "w"), ("controller", ""), ("controller", "  "), ("controller", None), (1, "w")],
)
def test_a_lease_owner_is_a_known_actor_type_with_an_id(
    owner_type: object, owner_id: object
) -> None:
    with pytest.raises(InvalidLeaseOwnerError):
        check_owner(owner_type, owner_id)


@pytest.mark.parametrize("authority", ["token", {"token": "t"}, 1])
def test_an_authority_must_be_a_run_claim(authority: object) -> None:
    with pytest.raises(InvalidClaimError):
        check_authority(authority)


def test_a_lease_longer_than_a_year_is_refused_before_its_expiry_overflows() -> None:
    # Found by the property tests: 251,635,075,196,873 ms put the expiry past year 9999.
    assert check_lease_ms(MAX_LEASE_MS) == MAX_LEASE_MS
    with pytest.raises(LeaseTooLongError, match=f"at most {MAX_LEASE_MS} milliseconds"):
        check_lease_ms(MAX_LEASE_MS + 1)
