"""Log lines for long-running commands: readable text, or one JSON object a line.

Every module logs to its own logger under ``runledger.`` (``logging.getLogger(__name__)``);
the library configures no handler, the CLI does (``configure_logging``). A JSON line has
``time``, ``level``, ``logger``, ``message``, ``trace_id`` and ``span_id`` (null outside a
span). A URL's password never reaches a line, and an exception shows its type only: its
message may quote a caller's input.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final, Literal

import orjson
from opentelemetry import trace

from runledger.infrastructure.storage.urls import REDACTED

LogFormat = Literal["text", "json"]
LOG_FORMATS: Final = ("text", "json")

_PASSWORD_IN_URL: Final = re.compile(r"(?P<head>[a-z][a-z0-9+.-]*://[^:/@\s]*:)[^@\s]*@", re.I)
_PASSWORD_PARAMETER: Final = re.compile(r"(?P<head>[?&]password=)[^&\s]*", re.I)


def scrubbed(text: str) -> str:
    """``text`` with the password of any URL in it replaced (a second guard after the
    redaction every printed URL goes through)."""
    text = _PASSWORD_IN_URL.sub(lambda m: f"{m['head']}{REDACTED}@", text)
    return _PASSWORD_PARAMETER.sub(lambda m: f"{m['head']}{REDACTED}", text)


class JsonLines(logging.Formatter):
    """One JSON object a line, with the trace and span of the code that logged."""

    def format(self, record: logging.LogRecord) -> str:
        context = trace.get_current_span().get_span_context()
        line: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": scrubbed(record.getMessage()),
            "trace_id": format(context.trace_id, "032x") if context.is_valid else None,
            "span_id": format(context.span_id, "016x") if context.is_valid else None,
        }
        if record.exc_info and record.exc_info[0] is not None:
            line["exception"] = record.exc_info[0].__qualname__
        return orjson.dumps(line).decode()


class ScrubbedText(logging.Formatter):
    """The usual text line, with passwords in URLs replaced."""

    def format(self, record: logging.LogRecord) -> str:
        return scrubbed(super().format(record))


def configure_logging(log_format: LogFormat, *, level: int = logging.INFO) -> None:
    """Send the ``runledger`` loggers to stderr in ``log_format``."""
    handler = logging.StreamHandler(sys.stderr)
    if log_format == "json":
        handler.setFormatter(JsonLines())
    else:
        handler.setFormatter(ScrubbedText("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    target = logging.getLogger("runledger")
    target.handlers = [handler]
    target.setLevel(level)
    target.propagate = False


__all__: Sequence[str] = ["LOG_FORMATS", "JsonLines", "LogFormat", "configure_logging", "scrubbed"]
