"""agentlog's engine: the event log, its stores, and (soon) the durable runtime."""

from .errors import (
    AgentlogError,
    ConcurrencyError,
    Indeterminate,
    Logical,
    NonDeterminismError,
    Permanent,
    Transient,
)

__all__ = [
    "AgentlogError",
    "ConcurrencyError",
    "Indeterminate",
    "Logical",
    "NonDeterminismError",
    "Permanent",
    "Transient",
]
