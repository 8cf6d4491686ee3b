"""agentlog's engine: the event log, its stores and the durable runtime."""

from .errors import (
    AgentlogError,
    ConcurrencyError,
    CorruptData,
    Indeterminate,
    Logical,
    NonDeterminismError,
    Permanent,
    RunBusy,
    Transient,
)
from .policy import CircuitBreaker, RetryPolicy
from .runtime import Engine, EventView, RunResult, RunSummary
from .state import RunState

__all__ = [
    "AgentlogError",
    "CircuitBreaker",
    "ConcurrencyError",
    "CorruptData",
    "Engine",
    "EventView",
    "Indeterminate",
    "Logical",
    "NonDeterminismError",
    "Permanent",
    "RetryPolicy",
    "RunBusy",
    "RunResult",
    "RunState",
    "RunSummary",
    "Transient",
]
