"""Storage, projection runners, the composition root (``open_store``), CLI and benchmarks."""

from runledger.infrastructure.audit.verify_bundle import verify_bundle
from runledger.infrastructure.store import WorkflowStore, open_store

__all__ = ["WorkflowStore", "open_store", "verify_bundle"]
