"""The base of every event, and the time events carry."""

from __future__ import annotations

import time
from typing import Any, ClassVar

import msgspec


def now() -> float:
    """Wall-clock seconds since the epoch, the time every event carries."""
    return time.time()


class Event(msgspec.Struct, frozen=True, tag_field="type", omit_defaults=True):
    """Base of every event. ``at`` is when it happened (epoch seconds, UTC)."""

    at: float
    SCHEMA: ClassVar[int] = 1


class Replayed(msgspec.Struct, frozen=True):
    """What a recovery folds again past a run's newest snapshot: ``events``, the ``calls``
    begun after it, and the ``seconds`` of recorded work from the snapshot's last event
    to the head's (no snapshot: from the run's start). Carried by ``agent_resumed``."""

    events: int = 0
    calls: int = 0
    seconds: float = 0.0


def event_data(event: Event) -> dict[str, Any]:
    """The event's fields as plain builtins (without ``type`` and ``at``): a nested
    struct (``agent_resumed.replayed``, each of ``fork_edited.edits``) as a dict."""
    return {
        f: msgspec.to_builtins(v) if _nested(v := getattr(event, f)) else v
        for f in event.__struct_fields__
        if f != "at"
    }


def _nested(v: Any) -> bool:
    return isinstance(v, msgspec.Struct) or (
        isinstance(v, list) and bool(v) and isinstance(v[0], msgspec.Struct)
    )
