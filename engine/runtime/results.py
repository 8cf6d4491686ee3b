"""What the engine hands back to callers: run results, event views, run summaries."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec

from ..effects import Effect


class RunResult(msgspec.Struct, frozen=True):
    """The outcome of run/resume/answer/abandon/rewind. ``error`` is one line or None."""

    run_id: str
    status: str  # running, completed, failed, paused, abandoned
    output: Any = None
    error: str | None = None
    waiting: str | None = None  # the question a paused run waits on
    # For a rewind: the parent's side effects after the fork position that still stand
    # in the world (committed, not reused by the fork, not compensated).
    standing: tuple[Effect, ...] = ()


class EventView(msgspec.Struct, frozen=True):
    """One recorded event as users see it: 1-based ``position``, ``type``, ``at``, ``data``."""

    position: int
    type: str
    at: datetime
    data: dict[str, Any]


class RunSummary(msgspec.Struct, frozen=True):
    run_id: str
    agent: str
    status: str
    started_at: datetime
    updated_at: datetime
    parent_run_id: str | None = None
    position: int = 0


def utc(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, tz=UTC)
