"""How a ``WorkflowError`` answers over HTTP: its status, and a ``{"code", "message"}`` body.

The domain classifies errors only by their stable kebab ``code``, so the HTTP status is
derived here, once, from that code: what names a missing thing is 404, what the request
itself got wrong is 422, what the store's present state refuses is 409, and a storage that
cannot answer now is 503 with ``Retry-After``. A new error class needs no entry unless its
code reads differently from what it means.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from starlette.responses import JSONResponse

from runledger.domain.errors import WorkflowError

RETRY_AFTER_SECONDS: Final = 1

BY_CODE: Final[Mapping[str, int]] = {
    # The store cannot answer now; the same request may succeed in a moment.
    "store.unavailable": 503,
    "store.closed": 503,
    # The stored history or a read model needs an operator: nothing the caller can change.
    "store.corrupt-event": 500,
    "store.unknown-event": 500,
    "projection.stalled": 500,
    "projection.rebuild-failed": 500,
    "projection.unknown": 404,
    # Codes that read like input but are refusals by the present state.
    "settings.chain-too-deep": 409,
    "update.too-many": 409,
    "query.unknown-run-cursor": 422,
    "branch.unknown-message": 422,
}
"""Codes whose status the rules below would get wrong, by code."""

_MISSING_SUFFIXES: Final = ("not-found", "missing")
_INPUT_SUFFIXES: Final = (
    "too-large",
    "too-deep",
    "too-long",
    "not-plain",
    "non-finite-number",
    "unknown-type",
    "not-a-choice",
    "missing-envelope",
    "incremental-event",
    "failure-required",
    "failure-forbidden",
    "binding-mismatch",
    "empty",
    "empty-prompt",
)
_INPUT_PREFIXES: Final = ("invalid", "text.", "json.")


def http_status(error: WorkflowError) -> int:
    """The HTTP status a ``WorkflowError`` answers with."""
    return status_of_code(error.code)


def status_of_code(code: str) -> int:
    """The HTTP status of an error ``code`` (see the module docstring)."""
    if code in BY_CODE:
        return BY_CODE[code]
    rule = code.rsplit(".", 1)[-1]
    if code.startswith(_INPUT_PREFIXES) or rule.startswith("invalid"):
        return 422
    if rule.endswith(_MISSING_SUFFIXES) and not rule.endswith(_INPUT_SUFFIXES):
        return 404
    if rule.endswith(_INPUT_SUFFIXES):
        return 422
    return 409


def error_body(code: str, message: str) -> dict[str, str]:
    """The JSON body of every error answer."""
    return {"code": code, "message": message}


def error_response(status: int, code: str, message: str) -> JSONResponse:
    """An error answer; a 503 says when to retry."""
    headers = {"Retry-After": str(RETRY_AFTER_SECONDS)} if status == 503 else None
    return JSONResponse(error_body(code, message), status_code=status, headers=headers)


def workflow_error_response(error: WorkflowError) -> JSONResponse:
    """The answer to a command or query that raised ``error``."""
    return error_response(http_status(error), error.code, error.message)


__all__: Sequence[str] = ["error_response", "http_status", "status_of_code"]
