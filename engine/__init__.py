"""agentlog's engine: the event log, its stores and the durable runtime."""

from .errors import (
    AgentlogError,
    ConcurrencyError,
    Indeterminate,
    Logical,
    NonDeterminismError,
    Permanent,
    Transient,
)
from .policy import CircuitBreaker, RetryPolicy
from .runtime import Engine, EventView, RunResult, RunSummary
from .state import RunState

__all__ = [
    "AgentlogError",
    "CircuitBreaker",
    "ConcurrencyError",
    "Engine",
    "EventView",
    "Indeterminate",
    "Logical",
    "NonDeterminismError",
    "Permanent",
    "RetryPolicy",
    "RunResult",
    "RunState",
    "RunSummary",
    "Transient",
]
