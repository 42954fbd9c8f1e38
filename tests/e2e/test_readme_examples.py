"""Every example of the README runs as written, so none can rot: each Python block, and each
shell block but the two opening commands (``.ci/run`` runs those verbatim, and
``tests/unit/test_readme_commands.py`` holds them to it).

Examples run in a scratch folder, on the embedded stores they name (memory, SQLite files); a
``runledger`` and ``.venv/bin/runledger`` there run this checkout's CLI. What the README leaves
to the reader is filled in, and only that: ``RUN_ID`` and ``URL`` in the audit example are a
demo store's, a server example's port is a free one, and the bench example runs one row in
its ``--quick`` form (the whole bench takes minutes). A block that installs from a package
index (``pip install 'runledger[otel]'``) or names a placeholder (``postgresql://…``) cannot run
here as written and is left out, by that rule and no other (``runnable``).
"""

from __future__ import annotations

import os
import re
import shlex
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.cli import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
PRELUDE_MARK = "# store: an open store with a run"
PRELUDE = """
from runledger.domain import Actor
from runledger.infrastructure import open_store
store = open_store("memory://")
store.create_run("run-1", workflow_name="review", input={"pr": 42})
store.bind_origin_session("run-1", "session-1")
"""
"""What a block marked with ``PRELUDE_MARK`` continues from: the README says so in the block."""


@dataclass(frozen=True)
class Block:
    language: str
    line: int
    text: str

    @property
    def id(self) -> str:
        return f"{self.language}-line-{self.line}"


def readme_blocks() -> list[Block]:
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    return [
        Block(match.group(1), readme.count("\n", 0, match.start()) + 1, match.group(2))
        for match in re.finditer(r"^```(\w+)\n(.*?)^```", readme, flags=re.DOTALL | re.M)
    ]


BLOCKS = readme_blocks()
PYTHON = [block for block in BLOCKS if block.language == "python"]


def runnable(block: Block) -> bool:
    """Whether a shell block can run here: no install from an index, no placeholder URL."""
    return "pip install" not in block.text and "…" not in block.text


SHELL = [block for block in BLOCKS if block.language == "sh"][2:]
RUNNABLE_SHELL = [block for block in SHELL if runnable(block)]


def environment(folder: Path) -> dict[str, str]:
    """The process environment with this checkout's ``runledger`` first on the PATH."""
    bin_dir = folder / ".venv" / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / "runledger"
    shim.write_text(f'#!/bin/sh\nexec {sys.executable} -m runledger.infrastructure.cli "$@"\n')
    shim.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env["PATH"] = f"{bin_dir}{os.pathsep}{env['PATH']}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "120"
    return env


def test_the_readme_has_examples_of_both_kinds() -> None:
    assert len(PYTHON) >= 2
    assert len(RUNNABLE_SHELL) >= 3


@pytest.mark.parametrize("block", PYTHON, ids=lambda block: block.id)
def test_a_python_example_runs_as_written(
    block: Block, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RUNLEDGER_URL", raising=False)
    namespace: dict[str, object] = {"__name__": "readme_example"}
    if PRELUDE_MARK in block.text:
        exec(compile(PRELUDE, "<prelude>", "exec"), namespace)
    try:
        exec(compile(block.text, f"README.md:{block.line}", "exec"), namespace)
    finally:
        store = namespace.get("store")
        close = getattr(store, "close", None)
        if callable(close):
            close()


@contextmanager
def serving(command: str, folder: Path, env: dict[str, str]) -> Iterator[int]:
    """Run a ``runledger serve`` line of the README on a free port until the block is done."""
    port = free_port()
    command = command.split(" #")[0].rstrip()  # the README's comment, not an argument
    if "--port" in command:
        command = re.sub(r"--port \d+", f"--port {port}", command)
    else:
        command += f" --port {port}"
    words = shlex.split(command)
    assignments = [word for word in words if "=" in word.split("/")[0] and word[0] != "-"]
    argv = words[len(assignments) :]
    argv[0] = str(folder / argv[0]) if "/" in argv[0] else argv[0]
    server = subprocess.Popen(
        argv,
        cwd=folder,
        env=env | dict(word.split("=", 1) for word in assignments),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            # Up once it answers HTTP: the port listens before the server handles signals.
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
                break
            except urllib.error.HTTPError:
                break
            except OSError:
                pass
            assert server.poll() is None, server.communicate()
            time.sleep(0.1)
        else:
            pytest.fail(f"{command!r} did not listen on port {port}")
        yield port
    finally:
        server.send_signal(signal.SIGINT)
        out, err = server.communicate(timeout=30)
    assert server.returncode == 0, (command, out, err)
    assert "runledger serve: stopped, store closed" in out


def run_shell(text: str, folder: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Run a block with bash; its output goes to files, so a job it leaves in the background
    (``curl -N &``) holds no pipe open, and that job ends with the block's process group."""
    out_path, err_path = folder / "block.out", folder / "block.err"
    with out_path.open("w") as out, err_path.open("w") as err:
        process = subprocess.Popen(
            ["bash", "-euo", "pipefail", "-c", text],
            cwd=folder,
            env=env,
            stdout=out,
            stderr=err,
            text=True,
            start_new_session=True,
        )
        try:
            process.wait(timeout=240)
        finally:
            with suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
    return subprocess.CompletedProcess(
        process.args, process.returncode, out_path.read_text(), err_path.read_text()
    )


def demo_store(folder: Path, env: dict[str, str]) -> tuple[str, str]:
    """A SQLite store the demo played into, and its first run's id."""
    url = f"sqlite:///{folder / 'audited.db'}"
    subprocess.run(
        ["runledger", "demo", "--url", url], cwd=folder, env=env, check=True, capture_output=True
    )
    listed = subprocess.run(
        ["runledger", "runs", "list", "--json", "--url", url, "--limit", "1"],
        cwd=folder,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    run_id = re.search(r'"run_id": "([^"]+)"', listed.stdout)
    assert run_id is not None, listed.stdout
    return url, run_id.group(1)


def shell_marks(block: Block) -> list[pytest.MarkDecorator]:
    return [pytest.mark.postgres] if "postgresql://" in block.text else []


@pytest.mark.parametrize(
    "block",
    [pytest.param(block, id=block.id, marks=shell_marks(block)) for block in RUNNABLE_SHELL],
)
def test_a_shell_example_runs_as_written(block: Block, tmp_path: Path) -> None:
    env = environment(tmp_path)
    lines = [line for line in block.text.splitlines() if line.strip()]
    serve_lines = [line for line in lines if "runledger serve" in line]
    if serve_lines and len(serve_lines) == len(lines):
        # Server examples: each line starts a server that must come up and stop cleanly.
        for line in serve_lines:
            with serving(line, tmp_path, env):
                pass
        return
    # The README's scratch files in /tmp go to this test's folder instead.
    text = block.text.replace("sqlite:////tmp/", f"sqlite:///{tmp_path}/")
    if "RUN_ID" in text:
        url, run_id = demo_store(tmp_path, env)
        text = text.replace("RUN_ID", run_id).replace("--url URL", f"--url {url}")
    text = re.sub(
        r"(runledger bench [^\n]*?)(?: --seconds \S+)?$", r"\1 --quick --only P1", text, flags=re.M
    )
    if "$API" in text:
        served = env | {"RUNLEDGER_SERVE_TOKEN": "s3cret"}
        with serving("runledger serve --url sqlite:///served.db", tmp_path, served) as port:
            text = text.replace("127.0.0.1:8765", f"127.0.0.1:{port}")
            # The streaming request runs in the background: give it a moment to print.
            outcome = run_shell(text + "\nsleep 2\n", tmp_path, served)
        assert outcome.returncode == 0, outcome
        assert "event: revision" in outcome.stdout, outcome.stdout
        return
    outcome = run_shell(text, tmp_path, env)
    assert outcome.returncode == 0, outcome
