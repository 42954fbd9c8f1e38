"""The fast call check agrees with ``Signature.bind`` on every store method's signature."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runledger.domain.errors import InvalidCallError
from runledger.infrastructure.store import WorkflowStore, _CallShape

METHODS = sorted(
    name
    for name, member in vars(WorkflowStore).items()
    if not name.startswith("_") and callable(member) and hasattr(member, "__wrapped__")
)


def _signature(name: str) -> inspect.Signature:
    return inspect.signature(getattr(WorkflowStore, name).__wrapped__)


def test_the_store_has_forwarded_methods_to_check() -> None:
    assert "queue_follow_up" in METHODS
    assert len(METHODS) > 20


@settings(max_examples=400, deadline=None)
@given(
    name=st.sampled_from(METHODS),
    positional=st.integers(min_value=0, max_value=8),
    extra=st.lists(st.sampled_from(["run_id", "self", "bogus", "as_of", "actor"]), max_size=2),
    dropped=st.integers(min_value=0, max_value=6),
)
def test_fits_only_what_bind_accepts(
    name: str, positional: int, extra: list[str], dropped: int
) -> None:
    signature = _signature(name)
    parameters = list(signature.parameters.values())[1:]
    args = tuple(range(positional))
    kwargs: dict[str, Any] = {
        parameter.name: 0
        for parameter in parameters[positional:]
        if parameter.default is parameter.empty
    }
    kwargs.update(dict.fromkeys(extra, 0))
    for key in list(kwargs)[:dropped]:
        del kwargs[key]
    shape = _CallShape(signature, name)
    try:
        signature.bind(None, *args, **kwargs)
    except TypeError:
        with pytest.raises(InvalidCallError):
            shape.check(args, kwargs)
    else:
        shape.check(args, kwargs)


def test_a_wrong_call_is_worded_by_bind() -> None:
    shape = _CallShape(_signature("queue_follow_up"), "queue_follow_up")
    with pytest.raises(InvalidCallError) as raised:
        shape.check(("run-1",), {"bogus": 1})
    # Python's own wording, naming the public method rather than the internal class.
    assert str(raised.value).startswith("Missing a required argument: 'request_id';")
    assert "WorkflowStore.queue_follow_up takes (run_id, *, request_id" in str(raised.value)
