"""What users may see of what the log holds: events with their secret-named input
redacted, and timestamps as UTC datetimes. The runtime's results and every reader (views,
the CLI) show events through here."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from msgspec.structs import replace

from .events import AgentStarted, Event
from .secrets import redact

if TYPE_CHECKING:
    from .store import Recorded


def shown(r: Recorded) -> Recorded:
    """The recorded event ``r`` as users may see it, still typed: an ``agent_started``
    input's secret-named fields (stored only when the store encrypts) redacted."""
    if isinstance(r.event, AgentStarted):
        return replace(r, event=shown_event(r.event))
    return r


def shown_event(event: Event) -> Event:
    """``event`` as users may see it (see :func:`shown`)."""
    if isinstance(event, AgentStarted):
        return replace(event, input=redact(event.input))
    return event


def utc(ts: float) -> datetime:
    """Epoch seconds as an aware UTC datetime; ValueError/OverflowError/TypeError when it
    is not one (NaN, infinite, beyond year 9999, not a number)."""
    if isinstance(ts, bool) or not isinstance(ts, (int, float)):
        raise TypeError(f"not a timestamp: {ts!r}"[:80])
    return datetime.fromtimestamp(ts, tz=UTC)
