"""The durable runtime: Engine, the run context and the durable-call path.

``Engine`` loads on first access (PEP 562): the light result types do not pull it in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .results import EventView, RunResult, RunSummary

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["Engine", "EventView", "RunResult", "RunSummary"]


def __getattr__(name: str) -> Any:
    if name == "Engine":
        from .engine import Engine

        return Engine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
