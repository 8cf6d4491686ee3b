"""The durable runtime: Engine, the run context and the durable-call path."""

from .engine import Engine
from .results import EventView, RunResult, RunSummary

__all__ = ["Engine", "EventView", "RunResult", "RunSummary"]
