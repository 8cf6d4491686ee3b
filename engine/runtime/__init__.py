"""The durable runtime: Engine, the run context and the durable-call path.

``Engine`` loads on first access (PEP 562): the light result types do not pull it in.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .._lazy import lazy_exports
from .run.results import EventView, RunResult, RunSummary

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["Engine", "EventView", "RunResult", "RunSummary"]

__getattr__, __dir__ = lazy_exports(__name__, {"Engine": ".engine"})
