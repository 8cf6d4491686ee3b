"""Child runs: spawn, start, a parent's wait and wake-up, a supervisor's restarts."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .spawn import Child

__all__ = ["Child"]

__getattr__, __dir__ = lazy_exports(__name__, {"Child": ".spawn"})
