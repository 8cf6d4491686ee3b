"""Schedules: cadence (cron or every N s, due ticks), define, scheduling, firing."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..._lazy import lazy_exports

if TYPE_CHECKING:
    from .cadence import Cadence
    from .define import Schedule
    from .firing import Ticker
    from .scheduling import Scheduling

__all__ = ["Cadence", "Schedule", "Scheduling", "Ticker"]

# Loaded on first access (PEP 562): a reader of tick names (``agentlog diff``) imports
# cadence alone, not the runtime that firing and scheduling stand on.
__getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "Cadence": ".cadence",
        "Schedule": ".define",
        "Ticker": ".firing",
        "Scheduling": ".scheduling",
    },
)
