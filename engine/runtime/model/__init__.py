"""Model calls: run.decide, @engine.model and run.stream, under the tools' policies."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .decisions import DecisionDef, Policies

__all__ = ["DecisionDef", "Policies"]

__getattr__, __dir__ = lazy_exports(
    __name__, {"DecisionDef": ".decisions", "Policies": ".decisions"}
)
