"""Every command of the README's command table works from the built wheel with only
runledger's runtime dependencies, as after README command 1 (no extras).

The new environment sees exactly the distributions runledger's runtime requirements reach
(followed from the installed metadata, extras included where a requirement asks for them),
through a folder of links to their files, so a command that imports a test-only package
(httpx once was) fails here as it would for a user; nothing is downloaded.
"""

from __future__ import annotations

import importlib.metadata as metadata
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tests.e2e.test_host_project import REPO_ROOT, run
from tests.support.cli import free_port

EMPTY_SQLITE_ERROR = "store.not-found"


def runtime_distributions() -> dict[str, metadata.Distribution]:
    """runledger's runtime dependencies, followed through their own requirements."""
    found: dict[str, metadata.Distribution] = {}
    pending: list[tuple[str, frozenset[str]]] = [("runledger", frozenset())]
    while pending:
        name, extras = pending.pop()
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # a requirement for another platform or Python
        key = f"{dist.metadata['Name'].lower().replace('_', '-')}[{','.join(sorted(extras))}]"
        if key in found:
            continue
        found[key] = dist
        for text in dist.requires or []:
            requirement = Requirement(text)
            wanted = [
                requirement.marker is None or requirement.marker.evaluate({"extra": extra})
                for extra in (extras or {""})
            ]
            if any(wanted):
                pending.append((requirement.name, frozenset(requirement.extras)))
    return {key: dist for key, dist in found.items() if not key.startswith("runledger[")}


def link_runtime_site(folder: Path) -> Path:
    """A folder holding links to the runtime distributions' top-level files only."""
    folder.mkdir()
    for dist in runtime_distributions().values():
        base = Path(str(dist.locate_file("")))
        for file in dist.files or []:
            top = file.parts[0]
            source, target = base / top, folder / top
            if top in ("..", "__pycache__") or target.exists() or not source.exists():
                continue
            target.symlink_to(source)
    return folder


@pytest.fixture(scope="module")
def wheel_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh environment with the built wheel and nothing but its runtime dependencies."""
    root = tmp_path_factory.mktemp("wheel")
    wheels = root / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, REPO_ROOT)
    (wheel,) = wheels.glob("runledger-*.whl")
    venv = root / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    runtime = link_runtime_site(root / "runtime-site")
    (Path(site.stdout.strip()) / "runtime-dependencies.pth").write_text(f"{runtime}\n")
    for test_only in ("pytest", "hypothesis", "playwright", "freezegun"):
        probe = subprocess.run(
            [python, "-c", f"import {test_only}"], capture_output=True, text=True, check=False
        )
        assert probe.returncode != 0, f"{test_only} must not be importable here"
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", wheel)
    return venv / "bin" / "runledger"


def cli(runledger: Path, *args: str, cwd: Path, code: int = 0) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env.pop("PYTHONPATH", None)
    env["COLUMNS"] = "120"
    result = subprocess.run(
        [str(runledger), *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == code, f"{args}\n{result.stdout}\n{result.stderr}"
    assert "Traceback" not in result.stderr, result.stderr
    return result


def started_then_stopped(argv: list[str], cwd: Path, ready: str) -> str:
    """Start a long-running command, wait for its ``ready`` line, stop it with SIGINT."""
    env = {key: value for key, value in os.environ.items() if key != "RUNLEDGER_URL"}
    env.pop("PYTHONPATH", None)
    process = subprocess.Popen(
        argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    lines: list[str] = []
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    for line in process.stdout:
        lines.append(line)
        if ready in line or time.monotonic() > deadline:
            break
    time.sleep(0.5)  # signal handlers are in place once the ready line is out
    process.send_signal(signal.SIGINT)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 0, ("".join(lines) + out, err)
    return "".join(lines) + out


@pytest.fixture(scope="module")
def played(wheel_python: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A folder whose default store (``sqlite:///runledger.db``) the demo played into."""
    folder = tmp_path_factory.mktemp("played")
    cli(wheel_python, "demo", cwd=folder)
    return folder, "sqlite:///runledger.db"


def first_run(runledger: Path, folder: Path) -> str:
    page = json.loads(cli(runledger, "runs", "list", "--json", "--limit", "1", cwd=folder).stdout)
    run_id: str = page["runs"][0]["run_id"]
    return run_id


def test_the_read_only_commands_refuse_a_missing_store_from_the_wheel(
    wheel_python: Path, tmp_path: Path
) -> None:
    for args in (["projections", "status"], ["runs", "list"], ["audit", "run-1"]):
        result = cli(wheel_python, *args, cwd=tmp_path, code=2)
        assert EMPTY_SQLITE_ERROR in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_runs_and_projections_commands_work_from_the_wheel(
    wheel_python: Path, played: tuple[Path, str]
) -> None:
    folder, _ = played
    run_id = first_run(wheel_python, folder)
    assert run_id in cli(wheel_python, "runs", "list", cwd=folder).stdout
    assert run_id in cli(wheel_python, "runs", "show", run_id, cwd=folder).stdout
    status = json.loads(cli(wheel_python, "projections", "status", "--json", cwd=folder).stdout)
    assert {entry["lag"] for entry in status} == {0}
    cli(wheel_python, "projections", "verify", "--all", cwd=folder)
    cli(wheel_python, "projections", "rebuild", "runs", cwd=folder)


def test_audit_commands_work_from_the_wheel(wheel_python: Path, played: tuple[Path, str]) -> None:
    folder, _ = played
    run_id = first_run(wheel_python, folder)
    assert "run.created" in cli(wheel_python, "audit", run_id, "--lineage", cwd=folder).stdout
    cli(wheel_python, "audit", run_id, "--verify", cwd=folder)
    cli(wheel_python, "audit", run_id, "--export", "run.jsonl", "--lineage", cwd=folder)
    assert "intact" in cli(wheel_python, "audit", "verify-bundle", "run.jsonl", cwd=folder).stdout


def test_the_bench_runs_from_the_wheel_including_its_http_rows(
    wheel_python: Path, tmp_path: Path
) -> None:
    url = f"sqlite:///{tmp_path / 'bench.db'}"
    result = cli(
        wheel_python, "bench", "--url", url, "--quick", "--only", "P1,S1", "--json", cwd=tmp_path
    )
    rows = {row["id"] for row in json.loads(result.stdout)["results"]}
    assert rows == {"P1", "S1"}


def test_the_long_running_commands_start_and_stop_from_the_wheel(
    wheel_python: Path, played: tuple[Path, str]
) -> None:
    folder, _ = played
    port = str(free_port())
    served = started_then_stopped(
        [str(wheel_python), "serve", "--port", port], folder, "SIGINT or SIGTERM stops"
    )
    assert f"http://127.0.0.1:{port}/" in served
    stopped = started_then_stopped(
        [str(wheel_python), "projections", "run"], folder, "projection worker following"
    )
    assert "projection worker stopped" in stopped
