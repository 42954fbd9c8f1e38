"""The ``runledger`` command line as a user runs it: the real module in a subprocess."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Outcome:
    """How a command ended and what it printed."""

    returncode: int
    stdout: str
    stderr: str

    def __str__(self) -> str:
        return f"exit code {self.returncode}\n--- stdout\n{self.stdout}--- stderr\n{self.stderr}"

    def json(self) -> Any:
        """What the command printed, read as one JSON document."""
        return json.loads(self.stdout)


def runledger(*args: str, cwd: Path, columns: int = 200, timeout: float = 120) -> Outcome:
    """Run ``runledger ARGS`` in ``cwd`` on a console ``columns`` wide (a pipe's width)."""
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = str(columns)
    completed = subprocess.run(
        [sys.executable, "-m", "runledger.infrastructure.cli", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return Outcome(completed.returncode, completed.stdout, completed.stderr)


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on now."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def bench(url: str, cwd: Path, *only: str) -> subprocess.CompletedProcess[str]:
    """``runledger bench --json --quick`` on ``url`` (small sizes), only the rows named."""
    environment = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    chosen = ["--only", ",".join(only)] if only else []
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "runledger.infrastructure.cli",
            "bench",
            "--url",
            url,
            "--json",
            "--quick",
            *chosen,
        ],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=environment,
        timeout=600,
        check=False,
    )
