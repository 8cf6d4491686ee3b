"""The base of every event, and the time events carry."""

from __future__ import annotations

import time
from typing import ClassVar

import msgspec


def now() -> float:
    """Wall-clock seconds since the epoch, the time every event carries."""
    return time.time()


class Event(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True):
    """Base of every event. ``at`` is when it happened (epoch seconds, UTC)."""

    at: float
    SCHEMA: ClassVar[int] = 1
