"""The workflow domain: aggregates, events, commands, errors and the application service."""

from runledger.domain.errors import WorkflowError
from runledger.domain.values import Actor

__all__ = ["Actor", "WorkflowError"]
