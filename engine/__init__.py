"""agentlog's engine: the event log, its stores and the durable runtime.

Names other than the errors load on first access (PEP 562), so importing ``engine`` (or
one of its light modules, as the CLI's reading commands do) does not load the runtime.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from . import codec as codec  # engine.codec.register(type, encode, decode)
from ._lazy import lazy_exports
from .errors import (
    AgentlogError,
    BudgetExhausted,
    ChildFailed,
    ConcurrencyError,
    CorruptData,
    Indeterminate,
    Logical,
    NonDeterminismError,
    Permanent,
    RunBusy,
    Transient,
)

if TYPE_CHECKING:
    from .budget import Budget, Usage
    from .policy import CircuitBreaker, RetryPolicy
    from .runtime import Engine, EventView, RunResult, RunSummary
    from .runtime.asked import Given
    from .runtime.config import EngineConfig
    from .state import RunState
    from .supervision import Supervisor

# name -> the module (relative to this package) that defines it, loaded on first access
_LAZY = {
    "Budget": ".budget",
    "Usage": ".budget",
    "CircuitBreaker": ".policy",
    "Engine": ".runtime.engine",
    "EngineConfig": ".runtime.config",
    "EventView": ".runtime.results",
    "Given": ".runtime.asked",
    "RetryPolicy": ".policy",
    "RunResult": ".runtime.results",
    "RunState": ".state",
    "RunSummary": ".runtime.results",
    "Supervisor": ".supervision",
}

__all__ = [
    "AgentlogError",
    "Budget",
    "BudgetExhausted",
    "ChildFailed",
    "CircuitBreaker",
    "ConcurrencyError",
    "CorruptData",
    "Engine",
    "EngineConfig",
    "EventView",
    "Given",
    "Indeterminate",
    "Logical",
    "NonDeterminismError",
    "Permanent",
    "RetryPolicy",
    "RunBusy",
    "RunResult",
    "RunState",
    "RunSummary",
    "Supervisor",
    "Transient",
    "Usage",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
