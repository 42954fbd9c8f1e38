"""The managed effect state machine, one test per transition (upstream §9.4; decisions 17,
23, 26; the README's table)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from runledger.domain.canonical import sha256hex
from runledger.domain.effects import (
    Effect,
    check_label,
    check_outcome,
    check_request,
    effect_id_for,
)
from runledger.domain.errors import (
    EffectKeyReusedError,
    EffectNotApplyingError,
    EffectNotRetryableError,
    InvalidEffectLabelError,
    InvalidEffectOutcomeError,
    InvalidEffectRequestError,
)
from runledger.domain.values import SYSTEM, Actor, EffectRecovery
from tests.support.specification import Event, events_of, given

NOW = datetime(2026, 1, 1, tzinfo=UTC)
HOST = Actor("host")
REQUEST: dict[str, Any] = {"to": "a@example.com"}
EffectStep = Callable[[Effect], object]


def reserved(recovery: EffectRecovery = "manual") -> Effect:
    request = {**REQUEST, "recovery": recovery}
    return Effect.reserve_new(
        effect_id_for("run-1", "email", "k"),
        run_id="run-1",
        effect_type="email",
        key="k",
        request=request,
        recovery=recovery,
        actor=HOST,
        now=NOW,
    )


def settled(outcome: Any = "applied", attempt: int = 1) -> EffectStep:
    return lambda e: e.settle(
        attempt=attempt, outcome=outcome, result={"ok": 1}, actor=HOST, now=NOW
    )


def recovered() -> EffectStep:
    return lambda e: e.recover(actor=SYSTEM, now=NOW)


def retried() -> EffectStep:
    return lambda e: e.retry(actor=HOST, now=NOW)


def reserved_again(request: dict[str, Any] | None = None) -> EffectStep:
    return lambda e: e.reserve_again(
        request if request is not None else e.request, actor=HOST, now=NOW
    )


def history(*steps: EffectStep, recovery: EffectRecovery = "manual") -> list[Event]:
    return events_of(reserved(recovery), *steps)


def test_the_effect_id_is_decision_17s_digest() -> None:
    assert effect_id_for("run-1", "email", "k") == ("effect-" + sha256hex("run-1\0email\0k")[:40])


def test_none_to_applying_a_new_reservation_is_attempt_one() -> None:
    effect = (
        given(Effect, [])
        .when_creating(lambda: reserved())
        .then([("effect.reserved", {"effect_type": "email", "key": "k", "recovery": "manual"})])
    )
    assert (effect.status, effect.attempt) == ("applying", 1)


def test_applying_to_applied() -> None:
    effect = (
        given(Effect, history())
        .when(settled("applied"))
        .then([("effect.settled", {"attempt": 1, "outcome": "applied", "result": {"ok": 1}})])
    )
    assert effect.status == "applied"


def test_applying_to_failed() -> None:
    effect = (
        given(Effect, history())
        .when(settled("failed"))
        .then([("effect.settled", {"outcome": "failed"})])
    )
    assert effect.status == "failed"


def test_applying_to_retry_ready_when_recovering_an_idempotent_effect() -> None:
    spec = given(Effect, history(recovery="idempotent")).when(recovered())
    effect = spec.then([("effect.retry-ready", {"attempt": 1, "reason": "recovered"})])
    assert effect.status == "retry_ready"
    assert spec.result is False


def test_applying_to_ambiguous_when_recovering_a_manual_effect() -> None:
    spec = given(Effect, history()).when(recovered())
    effect = spec.then([("effect.ambiguous", {"attempt": 1})])
    assert effect.status == "ambiguous"
    assert spec.result is True


def test_retry_ready_to_applying_with_the_next_attempt() -> None:
    spec = given(Effect, history(recovered(), recovery="idempotent")).when(reserved_again())
    effect = spec.then([("effect.attempt-started", {"attempt": 2})])
    assert (spec.result, effect.status, effect.attempt) == ("new_attempt", "applying", 2)


@pytest.mark.parametrize("outcome", ["failed", "ambiguous"])
def test_failed_or_ambiguous_to_retry_ready_by_retry(outcome: str) -> None:
    ended = settled("failed") if outcome == "failed" else recovered()
    effect = (
        given(Effect, history(ended))
        .when(retried())
        .then([("effect.retry-ready", {"reason": "retry"})])
    )
    assert effect.status == "retry_ready"


def test_reserving_an_applied_effect_adopts_it_and_writes_nothing() -> None:
    spec = given(Effect, history(settled("applied"))).when(reserved_again())
    spec.then([])
    assert spec.result == "adopted"


@pytest.mark.parametrize(
    "steps",
    [(), (settled("failed"),), (recovered(),)],
    ids=["applying", "failed", "ambiguous"],
)
def test_reserving_an_effect_in_any_other_status_is_ambiguous_and_writes_nothing(
    steps: tuple[EffectStep, ...],
) -> None:
    spec = given(Effect, history(*steps)).when(reserved_again())
    spec.then([])
    assert spec.result == "ambiguous"


def test_reserving_the_same_key_with_another_request_is_refused() -> None:
    given(Effect, history(settled())).when(reserved_again({"to": "b@example.com"})).then_raises(
        EffectKeyReusedError, "Managed effect key was reused with another request"
    )


@pytest.mark.parametrize(
    ("steps", "attempt"),
    [((settled(),), 1), ((settled("failed"),), 1), ((recovered(),), 1), ((), 2), ((), True)],
    ids=["applied", "failed", "ambiguous", "another attempt", "not an integer"],
)
def test_settling_an_effect_that_is_not_applying_that_attempt_is_refused(
    steps: tuple[EffectStep, ...], attempt: object
) -> None:
    given(Effect, history(*steps)).when(settled(attempt=attempt)).then_raises(  # type: ignore[arg-type]
        EffectNotApplyingError, "Managed effect is not applying"
    )


def test_recovering_an_effect_that_is_not_applying_changes_nothing() -> None:
    spec = given(Effect, history(settled())).when(recovered())
    spec.then([])
    assert spec.result is False


@pytest.mark.parametrize(
    "steps", [(), (settled(),), (recovered(), retried())], ids=["applying", "applied", "ready"]
)
def test_retrying_an_effect_that_is_not_failed_or_ambiguous_is_refused(
    steps: tuple[EffectStep, ...],
) -> None:
    effect = given(Effect, history(*steps)).aggregate
    assert effect is not None
    given(Effect, history(*steps)).when(retried()).then_raises(
        EffectNotRetryableError,
        f"Managed effect can only be retried when failed or ambiguous, not {effect.status}",
    )


# -- arguments --------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["", "x" * 257, None, 5, ["k"]])
@pytest.mark.parametrize("label", ["type", "key"])
def test_an_effect_label_is_nonempty_text_of_at_most_256_characters(
    label: str, value: object
) -> None:
    with pytest.raises(
        InvalidEffectLabelError,
        match=f"^Managed effect {label} must be nonempty text of at most 256 characters$",
    ):
        check_label(label, value)


def test_a_label_of_256_characters_is_accepted() -> None:
    assert check_label("key", "k" * 256) == "k" * 256


@pytest.mark.parametrize("request_", [None, [], "r", {"recovery": "sometimes"}, {"recovery": 1}])
def test_an_effect_request_is_an_object_with_a_known_recovery(request_: object) -> None:
    with pytest.raises(InvalidEffectRequestError):
        check_request(request_)


def test_an_effect_request_without_recovery_is_manual() -> None:
    assert check_request({"to": "x"}) == ({"to": "x"}, "manual")


@pytest.mark.parametrize("outcome", ["applying", "ok", None])
def test_an_effect_settles_only_as_applied_or_failed(outcome: object) -> None:
    with pytest.raises(InvalidEffectOutcomeError):
        check_outcome(outcome)
