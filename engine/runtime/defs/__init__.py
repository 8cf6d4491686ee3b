"""Definitions of tools and agents, argument hashing, and an engine's registry."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .definitions import AgentDef, ToolDef
    from .registry import Registry

__all__ = ["AgentDef", "Registry", "ToolDef"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"AgentDef": ".definitions", "Registry": ".registry", "ToolDef": ".definitions"}
)
