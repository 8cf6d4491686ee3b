"""What the engine hands back to callers: run results, event views, run summaries."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import msgspec

from ..effects import Effect
from ..events import AgentStarted, event_data
from ..secrets import redact

if TYPE_CHECKING:
    from ..store import Recorded


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
    # Set only by recover() for a run it could not resume: "refused" (an AgentlogError:
    # a damaged log, changed code, an agent that no longer imports) or "unexpected".
    not_resumed: str | None = None


class EventView(msgspec.Struct, frozen=True):
    """One recorded event as users see it: 1-based ``position``, ``type``, ``at``, ``data``."""

    position: int
    type: str
    at: datetime
    data: dict[str, Any]

    @classmethod
    def of(cls, r: Recorded) -> EventView:
        """How users see the recorded event ``r`` (an input's secret-named fields, stored
        only when the store encrypts, shown redacted)."""
        data = event_data(r.event)
        if isinstance(r.event, AgentStarted):
            data["input"] = redact(data["input"])
        return cls(r.position, str(r.event.__struct_config__.tag), utc(r.event.at), data)


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
