"""How the command line ends: its exit codes, and one line on stderr for every failure.

No input ever prints a traceback: a rejected input is one ``error [code]: message`` line, a
usage mistake one ``error [usage]: …`` line, and anything else (a bug) one ``internal error``
line that points to ``--debug``, which shows the traceback.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, Final, TextIO

import typer

from runledger.domain.errors import (
    CorruptEventError,
    ProjectionStalledError,
    RebuildFailedError,
    RestoreNotVerifiedError,
    WorkflowError,
)
from runledger.infrastructure.storage.urls import redact_urls

EXIT_OK: Final = 0
EXIT_DIFFERENCE: Final = 1
"""A verification found a difference (a rebuild that differs, a corrupt event, a bundle)."""
EXIT_USAGE: Final = 2
"""Bad usage or input: an unknown option, a bad URL, a run that does not exist."""
EXIT_UNAVAILABLE: Final = 3
"""The store could not serve the command now (unreachable, busy with a build): a retryable
``WorkflowError``; the same command may succeed later."""
EXIT_INTERNAL: Final = 70
"""A bug in runledger (EX_SOFTWARE); ``--debug`` shows its traceback."""
EXIT_INTERRUPTED: Final = 130

DEBUG_FLAG: Final = "--debug"


def _click_class(name: str) -> type[Exception]:
    # typer vendors click from 0.29 on (typer._click) and imports the real one before: its
    # exception classes are found from the one typer exports in every version.
    return next(kind for kind in typer.BadParameter.__mro__ if kind.__name__ == name)


_USAGE_ERROR: Final = _click_class("UsageError")


def exit_code_of(error: WorkflowError) -> int:
    """The exit code a ``WorkflowError`` ends a command with."""
    # A corrupt stored event or a stalled read model is what a verification looks for.
    if isinstance(error, CorruptEventError | ProjectionStalledError | RestoreNotVerifiedError):
        return EXIT_DIFFERENCE
    if isinstance(error, RebuildFailedError) and error.corrupt:
        return EXIT_DIFFERENCE
    # The store cannot serve it now (unreachable, a build holding its lock): try again later.
    if error.retryable:
        return EXIT_UNAVAILABLE
    return EXIT_USAGE


def error_line(code: str, message: str) -> str:
    """The one line a failure prints: ``error [code]: message``."""
    return f"error [{code}]: {message}"


def _usage_line(error: Any) -> str:
    context = getattr(error, "ctx", None)
    where = context.command_path if context is not None else "runledger"
    return error_line("usage", f"{error.format_message()} (see '{where} --help')")


def run_command_line(
    command: Callable[..., object], argv: Sequence[str], *, stderr: TextIO | None = None
) -> int:
    """Run the click ``command`` on ``argv`` and return its exit code, printing every failure
    as one line (and, after ``--debug`` anywhere in ``argv``, an internal error's traceback)."""
    err = sys.stderr if stderr is None else stderr
    debug = DEBUG_FLAG in argv
    # --debug is accepted anywhere on the line, not only before the sub-command.
    args = [DEBUG_FLAG] * debug + [arg for arg in argv if arg != DEBUG_FLAG]
    try:
        result = command(args=args, prog_name="runledger", standalone_mode=False)
    except _USAGE_ERROR as error:
        if type(error).__name__ == "NoArgsIsHelpError":
            # A group called with nothing after it shows its help, as click does.
            print(getattr(error, "format_message")())  # noqa: B009 - click's, found by name
        else:
            print(_usage_line(error), file=err)
        return EXIT_USAGE
    except WorkflowError as error:
        print(error_line(error.code, redact_urls(error.message)), file=err)
        return exit_code_of(error)
    except (KeyboardInterrupt, typer.Abort):
        print(error_line("interrupted", "stopped before it finished"), file=err)
        return EXIT_INTERRUPTED
    except Exception as error:
        if debug:
            traceback.print_exc(file=err)
        detail = redact_urls(f"{type(error).__name__}: {error}")
        hint = "" if debug else f"; run again with {DEBUG_FLAG} for the traceback"
        print(f"internal error: {detail}{hint}", file=err)
        return EXIT_INTERNAL
    if result == EXIT_INTERRUPTED:
        # typer (0.29 on) turns Ctrl-C into this exit code itself, printing nothing; no
        # runledger command exits with it of its own accord.
        print(error_line("interrupted", "stopped before it finished"), file=err)
        return EXIT_INTERRUPTED
    # Without standalone mode click returns an explicit exit's code, else what the command
    # returned (None for every runledger command).
    return result if isinstance(result, int) and not isinstance(result, bool) else EXIT_OK


__all__: Sequence[str] = [
    "EXIT_DIFFERENCE",
    "EXIT_INTERNAL",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_UNAVAILABLE",
    "EXIT_USAGE",
    "error_line",
    "exit_code_of",
    "run_command_line",
]
