"""The demo's story played into a served store, for the console's API and browser tests."""

from __future__ import annotations

import io

from rich.console import Console

from runledger.infrastructure.cli.demo_story import DemoIds, DemoResult, DemoScenario
from runledger.infrastructure.cli.render import Narrator
from runledger.infrastructure.store import WorkflowStore


def play_demo(store: WorkflowStore, token: str = "c0ffee") -> DemoResult:
    """Run ``runledger demo``'s scenario on ``store``, silently, under ids made from ``token``."""
    narrator = Narrator(Console(file=io.StringIO(), width=120))
    return DemoScenario(store, narrator, DemoIds.fresh(token)).run()
