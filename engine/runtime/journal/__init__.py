"""The pure folds of what a run's log says of each call, and a run's journal of calls."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .callstate import CallState
    from .recorded import Journal

__all__ = ["CallState", "Journal"]

__getattr__, __dir__ = lazy_exports(__name__, {"CallState": ".callstate", "Journal": ".recorded"})
