"""A host application with its own ``domain``, ``projections`` and ``infrastructure`` packages
installs runledger beside them, as a built wheel and as an editable install, and uses both.

Each case makes a fresh virtual environment. The third-party dependencies come from this test
run's environment through a plain path line (so nothing is downloaded for them), but runledger
and the host are installed into the new environment by pip, as a user would.
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
import textwrap
import zipfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
HOST_PACKAGES = ("domain", "projections", "infrastructure")

HOST_SCRIPT = textwrap.dedent(
    """
    import importlib, json, sys
    # The host's own top-level packages, by the names runledger's folders have.
    domain, projections, infrastructure = (
        importlib.import_module(name) for name in ("domain", "projections", "infrastructure")
    )
    Order = importlib.import_module("domain.model").Order
    from runledger.domain import Actor
    from runledger.infrastructure import open_store

    with open_store("memory://") as store:
        store.create_run("run-1", workflow_name="review", input={"order": Order(7).number})
        store.bind_origin_session("run-1", "session-1")
        queued = store.queue_follow_up(
            "run-1",
            request_id="r-1",
            target_session_id="session-1",
            actor=Actor("session", "session-1"),
            source="pi-session",
            prompt="Then summarise.",
        )
        queue = store.follow_up_queue("run-1")
    print(json.dumps({
        "host": [domain.OWNER, projections.OWNER, infrastructure.OWNER],
        "follow_ups": [item.request_id for item in queue.follow_ups],
        "adopted": queued.adopted,
        "runledger_domain": sys.modules["runledger.domain"].__file__,
    }))
    """
)


def run(*args: str | Path, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    result = subprocess.run(
        [str(arg) for arg in args], cwd=cwd, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, f"{args}\nstdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result


def make_host_project(root: Path) -> Path:
    """A host distribution whose top-level packages have runledger's folder names."""
    host = root / "host-app"
    for package in HOST_PACKAGES:
        (host / package).mkdir(parents=True)
        (host / package / "__init__.py").write_text(f'OWNER = "host {package}"\n')
    (host / "domain" / "model.py").write_text(
        "class Order:\n    def __init__(self, number: int) -> None:\n        self.number = number\n"
    )
    (host / "pyproject.toml").write_text(
        textwrap.dedent(
            """
            [build-system]
            requires = ["setuptools>=68"]
            build-backend = "setuptools.build_meta"

            [project]
            name = "host-app"
            version = "1.0"

            [tool.setuptools]
            packages = ["domain", "projections", "infrastructure"]
            """
        )
    )
    return host


def make_venv(root: Path) -> Path:
    """A fresh virtual environment that sees this run's third-party packages, not runledger."""
    venv = root / "venv"
    run(sys.executable, "-m", "venv", "--without-pip", venv)
    python = venv / "bin" / "python"
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    # A bare directory line: the directory joins sys.path, but the .pth files inside it (this
    # run's own editable runledger among them) are not executed.
    outer = sysconfig.get_paths()["purelib"]
    (Path(site.stdout.strip()) / "outer-dependencies.pth").write_text(outer + "\n")
    probe = run(python, "-c", "import importlib.util as u; print(u.find_spec('runledger'))")
    assert probe.stdout.strip() == "None", "the new environment must not see runledger yet"
    return python


def pip_install(python: Path, *args: str | Path) -> None:
    run(sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-deps", *args)


def check_runledger_installs_no_bare_layer(python: Path, cwd: Path) -> None:
    run(python, "-c", "import runledger.infrastructure, runledger.projections", cwd=cwd)
    for package in HOST_PACKAGES:
        probe = subprocess.run(
            [str(python), "-c", f"import {package}"], cwd=cwd, capture_output=True, text=True
        )
        assert probe.returncode == 1
        assert f"No module named '{package}'" in probe.stderr


def check_host_and_runledger_work_together(python: Path, cwd: Path) -> None:
    result = run(python, "-c", HOST_SCRIPT, cwd=cwd)
    parsed = json.loads(result.stdout.strip().splitlines()[-1])
    assert parsed["host"] == ["host domain", "host projections", "host infrastructure"]
    assert parsed["follow_ups"] == ["r-1"]
    assert parsed["adopted"] is False
    assert "host-app" not in parsed["runledger_domain"]


@pytest.fixture
def fresh(tmp_path: Path) -> tuple[Path, Path]:
    """A new environment and a folder outside the repository to run in."""
    return make_venv(tmp_path), tmp_path


@pytest.mark.slow
def test_the_wheel_installs_one_import_name_and_works_beside_a_host_with_a_domain_package(
    fresh: tuple[Path, Path],
) -> None:
    python, root = fresh
    wheels = root / "wheels"
    run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", wheels, REPO_ROOT)
    (wheel,) = wheels.glob("runledger-*.whl")
    tops = {name.split("/")[0] for name in zipfile.ZipFile(wheel).namelist()}
    assert {top for top in tops if not top.endswith(".dist-info")} == {"runledger"}
    pip_install(python, wheel)
    check_runledger_installs_no_bare_layer(python, cwd=root)
    pip_install(python, make_host_project(root))
    check_host_and_runledger_work_together(python, cwd=root)


@pytest.mark.slow
def test_an_editable_install_works_beside_a_host_with_a_domain_package(
    fresh: tuple[Path, Path],
) -> None:
    python, root = fresh
    pip_install(python, "-e", REPO_ROOT)
    check_runledger_installs_no_bare_layer(python, cwd=root)
    pip_install(python, make_host_project(root))
    check_host_and_runledger_work_together(python, cwd=root)
