"""A store keeps its calls in progress (``runtime._Calls``), and ``close`` waits for them:
none may stay behind however a call ends, including by a Ctrl-C. CPython raises a signal's
exception where it checks for signals: right after a call returns, and where a function
starts. The test raises one at each such point of ``running`` in turn, from a trace
function, as the signal would be raised there."""

from __future__ import annotations

import dis
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytest

from runledger.domain.errors import StoreClosedError
from runledger.infrastructure.runtime import _Calls

Tracer = Callable[[FrameType, str, Any], Any]


def interrupted_at(step: int, calls: _Calls) -> bool:
    """One call through ``calls.running()`` with a KeyboardInterrupt raised at the ``step``th
    point of the context manager's own frame where a signal can be raised; whether it was."""
    code = _Calls.running.__wrapped__.__code__  # type: ignore[attr-defined]
    names = {i.offset: i.opname for i in dis.get_instructions(code)}
    seen = 0
    raised = False
    after_call = True  # the frame's start

    def in_running(frame: FrameType, event: str, arg: Any) -> Tracer:
        nonlocal seen, raised, after_call
        if event != "opcode":
            return in_running
        if after_call:
            if seen == step and not raised:
                raised = True
                raise KeyboardInterrupt
            seen += 1
        after_call = names.get(frame.f_lasti, "").startswith("CALL")
        return in_running

    def on_call(frame: FrameType, event: str, arg: Any) -> Tracer | None:
        if frame.f_code is not code:
            return None
        frame.f_trace_opcodes = True
        return in_running

    sys.settrace(on_call)
    try:
        with calls.running():
            pass
    except KeyboardInterrupt:
        pass
    finally:
        sys.settrace(None)
    return raised


def closes_at_once(calls: _Calls) -> bool:
    closer = threading.Thread(target=calls.close, daemon=True)
    closer.start()
    closer.join(timeout=2)
    return not closer.is_alive()


def test_an_interrupt_at_any_step_of_a_call_leaves_no_call_counted() -> None:
    steps = 0
    while True:
        calls = _Calls()
        if not interrupted_at(steps, calls):
            break
        assert not calls._running, f"a Ctrl-C at step {steps} left the call counted"
        assert closes_at_once(calls), f"close waits forever after a Ctrl-C at step {steps}"
        steps += 1
    assert steps > 5, "the trace reached every point of the call"


def test_a_call_after_close_is_refused_and_not_counted() -> None:
    calls = _Calls()
    calls.close()
    with pytest.raises(StoreClosedError), calls.running():
        pass
    assert not calls._running
