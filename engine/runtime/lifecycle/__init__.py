"""A run's life: the run an agent receives, its driver, answering and rewinding it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .agentrun import AgentRun
    from .driver import Driver

__all__ = ["AgentRun", "Driver"]

__getattr__, __dir__ = lazy_exports(__name__, {"AgentRun": ".agentrun", "Driver": ".driver"})
