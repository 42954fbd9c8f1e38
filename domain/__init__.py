"""The workflow domain: aggregates, events, commands, errors and the application service."""

from domain.errors import WorkflowError
from domain.values import Actor

__all__ = ["Actor", "WorkflowError"]
