"""Undoing a run's committed side effects, last first: the plan and the saga."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .saga import Saga, UndoPlan

__all__ = ["Saga", "UndoPlan"]

__getattr__, __dir__ = lazy_exports(__name__, {"Saga": ".saga", "UndoPlan": ".saga"})
