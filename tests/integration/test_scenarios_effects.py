"""Managed effects through the store, on every backend (upstream §9.4; decisions 17, 23, 26),
and a worker killed between reserve and settle."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from runledger.domain.errors import (
    ClaimLostError,
    EffectKeyReusedError,
    EffectNotApplyingError,
    EffectNotFoundError,
    InvalidArgumentTypeError,
    InvalidEffectLabelError,
    InvalidEffectRequestError,
    RunMissingError,
)
from runledger.domain.records import EffectReservation
from runledger.domain.values import EffectRecovery
from runledger.infrastructure.store import WorkflowStore, open_store
from tests.support.assertions import assert_rejected, recording
from tests.support.scenario import RUN, running_run

REQUEST = {"to": "a@example.com", "subject": "Done"}


def reserve(
    store: WorkflowStore, key: str = "mail-1", recovery: EffectRecovery | None = None
) -> EffectReservation:
    request = REQUEST if recovery is None else {**REQUEST, "recovery": recovery}
    return store.reserve_effect(RUN, effect_type="email", key=key, request=request)


def test_a_new_reservation_is_applying_attempt_one(store: WorkflowStore) -> None:
    running_run(store)
    with recording(store) as recorded:
        reservation = reserve(store)
    assert reservation.outcome == "new"
    assert reservation.may_apply
    assert (reservation.effect.status, reservation.effect.attempt) == ("applying", 1)
    assert recorded.wire_names == ["effect.reserved"]
    assert store.get_effect(reservation.effect.effect_id) == reservation.effect


def test_a_settled_effect_is_adopted_by_the_next_reservation(store: WorkflowStore) -> None:
    running_run(store)
    effect_id = reserve(store).effect.effect_id
    settled = store.settle_effect(effect_id, attempt=1, outcome="applied", result={"id": 7})
    assert (settled.status, settled.result) == ("applied", {"id": 7})
    with recording(store) as recorded:
        again = reserve(store)
    assert again.outcome == "adopted"
    assert not again.may_apply
    assert again.effect.result == {"id": 7}
    assert recorded.wire_names == []


def test_an_effect_still_applying_is_ambiguous_to_another_reservation(
    store: WorkflowStore,
) -> None:
    running_run(store)
    reserve(store)
    again = reserve(store)
    assert again.outcome == "ambiguous"
    assert not again.may_apply


def test_recovery_makes_idempotent_effects_retry_ready_and_reports_safe(
    store: WorkflowStore,
) -> None:
    running_run(store)
    effect_id = reserve(store, recovery="idempotent").effect.effect_id
    with recording(store) as recorded:
        assert store.recover_applying_effects(RUN) == "safe"
    assert recorded.wire_names == ["effect.retry-ready"]
    next_attempt = reserve(store, recovery="idempotent")
    assert (next_attempt.outcome, next_attempt.effect.attempt) == ("new_attempt", 2)
    store.settle_effect(effect_id, attempt=2, outcome="applied")
    effect = store.get_effect(effect_id)
    assert effect is not None
    assert effect.status == "applied"


def test_recovery_makes_manual_effects_ambiguous_and_reports_it(store: WorkflowStore) -> None:
    running_run(store)
    reserve(store, "mail-1", recovery="idempotent")
    reserve(store, "mail-2")
    settled = reserve(store, "mail-3")
    store.settle_effect(settled.effect.effect_id, attempt=1, outcome="applied")
    with recording(store) as recorded:
        assert store.recover_applying_effects(RUN) == "ambiguous"
    assert recorded.wire_names == ["effect.retry-ready", "effect.ambiguous"]
    assert store.recover_applying_effects(RUN) == "safe"


def test_an_operator_retries_an_ambiguous_effect_as_a_new_attempt(store: WorkflowStore) -> None:
    running_run(store)
    effect_id = reserve(store).effect.effect_id
    store.recover_applying_effects(RUN)
    assert store.retry_effect(effect_id).status == "retry_ready"
    assert reserve(store).outcome == "new_attempt"


def test_a_failed_effect_is_ambiguous_until_retried(store: WorkflowStore) -> None:
    running_run(store)
    effect_id = reserve(store).effect.effect_id
    store.settle_effect(effect_id, attempt=1, outcome="failed", result={"error": "smtp"})
    assert reserve(store).outcome == "ambiguous"
    store.retry_effect(effect_id)
    assert reserve(store).outcome == "new_attempt"


def test_effects_appear_in_the_runs_event_log(store: WorkflowStore) -> None:
    running_run(store)
    reserve(store)
    names = [event.wire_name for event in store.event_log(run_id=RUN)]
    assert names[-1] == "effect.reserved"


def test_an_unknown_effect_reads_as_none(store: WorkflowStore) -> None:
    assert store.get_effect("effect-unknown") is None


def test_an_effect_id_that_is_not_text_is_refused_by_name(store: WorkflowStore) -> None:
    with pytest.raises(InvalidArgumentTypeError, match="effect_id must be text, not int"):
        store.get_effect(5)  # type: ignore[arg-type]


def test_a_claimed_run_fences_reserve_and_settle(store: WorkflowStore) -> None:
    running_run(store)
    effect_id = reserve(store).effect.effect_id
    claim = store.claim_run(RUN, owner_type="controller", owner_id="worker-1")
    assert claim is not None
    message = f"Workflow run claim lost (missingAuthority): {RUN}"
    assert_rejected(store, ClaimLostError, message, reserve, store, "mail-2")
    assert_rejected(
        store, ClaimLostError, message, store.settle_effect, effect_id, attempt=1, outcome="applied"
    )
    store.settle_effect(effect_id, attempt=1, outcome="applied", authority=claim)


# -- bad input ------------------------------------------------------------------------------


@pytest.mark.parametrize("label", ["type", "key"])
@pytest.mark.parametrize("value", ["", "x" * 257, None, 3])
def test_a_bad_label_is_refused_and_writes_nothing(
    store: WorkflowStore, label: str, value: object
) -> None:
    running_run(store)
    labels: dict[str, object] = {
        "effect_type": "email",
        "key": "k",
        "effect_type" if label == "type" else "key": value,
    }
    assert_rejected(
        store,
        InvalidEffectLabelError,
        f"Managed effect {label} must be nonempty text of at most 256 characters",
        store.reserve_effect,
        RUN,
        request=REQUEST,
        **labels,
    )


def test_reusing_a_key_with_another_request_is_refused(store: WorkflowStore) -> None:
    running_run(store)
    reserve(store)
    assert_rejected(
        store,
        EffectKeyReusedError,
        "Managed effect key was reused with another request",
        store.reserve_effect,
        RUN,
        effect_type="email",
        key="mail-1",
        request={"to": "b@example.com"},
    )


@pytest.mark.parametrize("request_", [None, ["a"], {"recovery": "never"}])
def test_a_bad_request_is_refused(store: WorkflowStore, request_: object) -> None:
    running_run(store)
    with pytest.raises(InvalidEffectRequestError):
        store.reserve_effect(RUN, effect_type="email", key="k", request=request_)  # type: ignore[arg-type]


def test_settling_twice_is_refused(store: WorkflowStore) -> None:
    running_run(store)
    effect_id = reserve(store).effect.effect_id
    store.settle_effect(effect_id, attempt=1, outcome="applied")
    assert_rejected(
        store,
        EffectNotApplyingError,
        "Managed effect is not applying",
        store.settle_effect,
        effect_id,
        attempt=1,
        outcome="failed",
    )


def test_settling_or_retrying_an_unknown_effect_is_refused(store: WorkflowStore) -> None:
    message = "Managed effect not found: effect-x"
    assert_rejected(
        store,
        EffectNotFoundError,
        message,
        store.settle_effect,
        "effect-x",
        attempt=1,
        outcome="applied",
    )
    assert_rejected(store, EffectNotFoundError, message, store.retry_effect, "effect-x")


def test_reserving_on_a_missing_run_is_refused(store: WorkflowStore) -> None:
    assert_rejected(store, RunMissingError, f"Workflow run is missing: {RUN}", reserve, store)


# -- a worker killed between reserve and settle ---------------------------------------------

REQUEST_OF_WORKER = {"to": "a@example.com"}

WORKER = textwrap.dedent(
    """
    import sys, time
    from runledger.infrastructure import open_store

    url, applied, recovery = sys.argv[1], sys.argv[2], sys.argv[3]
    store = open_store(url)
    request = {"to": "a@example.com", "recovery": recovery}
    reservation = store.reserve_effect("run-1", effect_type="email", key="k", request=request)
    if reservation.may_apply:
        with open(applied, "a") as side_effect:
            side_effect.write(f"attempt {reservation.effect.attempt}\\n")
    time.sleep(60)  # killed here: after the side effect, before settle_effect
    """
)


@pytest.fixture(
    params=[
        pytest.param("sqlite", id="sqlite"),
        pytest.param("postgresql", id="postgresql", marks=pytest.mark.postgres),
    ]
)
def durable_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A store another process can open."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'effects.db'}"
    url: str = request.getfixturevalue("postgres_store_url")
    return url


def kill_between_reserve_and_settle(url: str, applied: Path, recovery: str) -> None:
    worker = subprocess.Popen(
        [sys.executable, "-c", WORKER, url, str(applied), recovery],
        env={**os.environ, "PYTHONPATH": os.getcwd()},
    )
    deadline = time.monotonic() + 60
    while not applied.exists() or not applied.read_text():
        assert worker.poll() is None, "the worker ended before applying its effect"
        assert time.monotonic() < deadline, "the worker never applied its effect"
        time.sleep(0.05)
    worker.send_signal(signal.SIGKILL)
    worker.wait()


def test_a_manual_effect_killed_before_settling_is_reported_and_never_applied_twice(
    durable_url: str, tmp_path: Path
) -> None:
    applied = tmp_path / "applied.txt"
    with open_store(durable_url) as store:
        running_run(store)
    kill_between_reserve_and_settle(durable_url, applied, "manual")
    with open_store(durable_url) as store:
        again = store.reserve_effect(
            RUN, effect_type="email", key="k", request={**REQUEST_OF_WORKER, "recovery": "manual"}
        )
        assert again.outcome == "ambiguous"
        assert not again.may_apply
        assert store.recover_applying_effects(RUN) == "ambiguous"
        effect = store.get_effect(again.effect.effect_id)
        assert effect is not None
        assert effect.status == "ambiguous"
    assert applied.read_text() == "attempt 1\n"


def test_an_idempotent_effect_killed_before_settling_is_safe_to_attempt_again(
    durable_url: str, tmp_path: Path
) -> None:
    applied = tmp_path / "applied.txt"
    with open_store(durable_url) as store:
        running_run(store)
    kill_between_reserve_and_settle(durable_url, applied, "idempotent")
    with open_store(durable_url) as store:
        assert store.recover_applying_effects(RUN) == "safe"
        request = {**REQUEST_OF_WORKER, "recovery": "idempotent"}
        retry = store.reserve_effect(RUN, effect_type="email", key="k", request=request)
        assert (retry.outcome, retry.effect.attempt) == ("new_attempt", 2)
        store.settle_effect(retry.effect.effect_id, attempt=2, outcome="applied")
        assert store.reserve_effect(RUN, effect_type="email", key="k", request=request).outcome == (
            "adopted"
        )
