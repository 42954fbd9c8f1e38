"""``Record.trusted``: the records a query builds from view rows, without validating them
again, are the very records ``model_construct`` (and validation) makes of the same values."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pydantic
import pytest

from runledger.domain.records import FollowUpQueue, FollowUpRecord, RunPage, RunSummary
from runledger.domain.values import Actor

AT = datetime(2026, 1, 1, 12, 30, tzinfo=UTC)


def follow_up(order: int) -> dict[str, Any]:
    return {
        "follow_up_id": f"follow-up-{order}",
        "run_id": "run-1",
        "request_id": f"request-{order}",
        "order": order,
        "target_session_id": "session-1",
        "actor": Actor("session", "session-1"),
        "source": "pi-session",
        "prompt": f"Follow-up {order}",
        "state": "queued",
        "reason": None,
        "created_at": AT,
        "updated_at": AT,
        "delivery": "pending",
    }


def summary() -> dict[str, Any]:
    return {
        "run_id": "run-1",
        "workflow_name": "review",
        "workflow_ref": "review@1",
        "title": None,
        "status": "running",
        "paused": False,
        "origin_session_id": "session-1",
        "parent_run_id": None,
        "root_run_id": "run-1",
        "lineage_kind": None,
        "restart_number": 0,
        "created_at": AT,
        "updated_at": AT,
        "finished_at": None,
    }


def test_a_trusted_record_is_the_record_validation_and_model_construct_make() -> None:
    values = follow_up(1)

    trusted = FollowUpRecord.trusted(**values)

    assert trusted == FollowUpRecord.model_construct(**values)
    assert trusted == FollowUpRecord.model_validate(values)
    assert trusted.model_dump() == FollowUpRecord.model_validate(values).model_dump()
    assert trusted.model_dump_json() == FollowUpRecord.model_validate(values).model_dump_json()
    assert trusted.model_fields_set == set(values)
    assert repr(trusted) == repr(FollowUpRecord.model_validate(values))


def test_records_holding_trusted_records_dump_as_validated_ones() -> None:
    queue = FollowUpQueue.trusted(
        run_id="run-1",
        origin_session_id="session-1",
        follow_ups=[FollowUpRecord.trusted(**follow_up(n)) for n in (1, 2)],
    )
    page = RunPage.trusted(runs=[RunSummary.trusted(**summary())], next_after=None)

    assert queue == FollowUpQueue.model_validate(queue.model_dump())
    assert page == RunPage.model_validate(page.model_dump())
    assert page.model_dump(mode="json")["runs"][0]["created_at"] == "2026-01-01T12:30:00Z"


def test_a_trusted_record_is_frozen_like_any_other() -> None:
    record = FollowUpRecord.trusted(**follow_up(1))

    with pytest.raises(pydantic.ValidationError):
        record.prompt = "changed"


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda values: values.pop("prompt"), "missing ['prompt'], unknown []"),
        (lambda values: values.update(extra=1), "missing [], unknown ['extra']"),
    ],
)
def test_a_trusted_record_needs_exactly_its_fields(change: Any, said: str) -> None:
    values = follow_up(1)
    change(values)

    with pytest.raises(TypeError) as raised:
        FollowUpRecord.trusted(**values)

    assert str(raised.value) == f"FollowUpRecord: {said}"
