"""Schedules: cadence (cron or every N s, due ticks), define, scheduling, firing."""

from __future__ import annotations

from .cadence import Cadence
from .define import Schedule
from .firing import Ticker
from .scheduling import Scheduling

__all__ = ["Cadence", "Schedule", "Scheduling", "Ticker"]
