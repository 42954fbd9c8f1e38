"""The CLI starts without the bench: its rows and their HTTP client load only for a bench run."""

from __future__ import annotations

import subprocess
import sys

LOADED_AT_START = (
    "import sys, runledger.infrastructure.cli.app\n"
    "print(sorted(m for m in sys.modules if m.startswith(('httpx', "
    "'runledger.infrastructure.cli.bench'))))\n"
)


def test_the_cli_app_imports_neither_the_bench_package_nor_httpx() -> None:
    result = subprocess.run(
        [sys.executable, "-c", LOADED_AT_START], capture_output=True, text=True, check=True
    )
    assert result.stdout.strip() == "[]"
