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
    RunFailed,
    Transient,
)

if TYPE_CHECKING:
    from .log.state import RunState
    from .policy.budget import Budget, Usage
    from .policy.failure import CircuitBreaker, RetryPolicy
    from .policy.recovery import Recovery
    from .policy.supervision import Supervisor
    from .runtime import Engine, EventView, RunResult, RunSummary
    from .runtime.host.config import EngineConfig
    from .runtime.run.asked import Given
    from .runtime.workers.handles import RunHandle
    from .runtime.workers.worker import Worker

# name -> the module (relative to this package) that defines it, loaded on first access
_LAZY = {
    "Budget": ".policy.budget",
    "Usage": ".policy.budget",
    "CircuitBreaker": ".policy.failure",
    "Engine": ".runtime.engine",
    "EngineConfig": ".runtime.host.config",
    "EventView": ".runtime.run.results",
    "Given": ".runtime.run.asked",
    "RetryPolicy": ".policy.failure",
    "Recovery": ".policy.recovery",
    "RunHandle": ".runtime.workers.handles",
    "Worker": ".runtime.workers.worker",
    "RunResult": ".runtime.run.results",
    "RunState": ".log.state",
    "RunSummary": ".runtime.run.results",
    "Supervisor": ".policy.supervision",
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
    "Recovery",
    "RetryPolicy",
    "RunBusy",
    "RunFailed",
    "RunHandle",
    "RunResult",
    "RunState",
    "RunSummary",
    "Supervisor",
    "Transient",
    "Usage",
    "Worker",
]


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
