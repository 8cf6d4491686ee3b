"""Query and form values read as the CLI reads its options: each one untrusted, checked,
and refused with one clear line (``UsageError``, a 400 page)."""

from __future__ import annotations

import time

from engine.errors import UsageError
from engine.kinds import RunStatus

from ..jsonvalue import shown

STATUSES = tuple(s.value for s in RunStatus)
COUNT_MAX = 2**62
MAX_TEXT = 300  # longer than any run id, agent name or checkpoint name worth asking for


def text(value: str | None, name: str) -> str | None:
    """A printable, bounded value, or None for none or an empty one."""
    if not value:
        return None
    if len(value) > MAX_TEXT or not value.isprintable():
        raise UsageError(f"{name} {shown(value)} is not a value any run has")
    return value


def status(value: str | None) -> str | None:
    if not value:
        return None
    if value not in STATUSES:
        raise UsageError(f"status must be one of {', '.join(STATUSES)}, not {shown(value)}")
    return value


def count(value: str | None, name: str, default: int) -> int:
    """A whole number from 0 to 2**62."""
    if not value:
        return default
    if not (value.isascii() and value.isdigit()) or int(value) > COUNT_MAX:
        raise UsageError(f"{name} {shown(value)} is not a whole number of 0 to 2**62")
    return int(value)


def moment(value: str | None, name: str) -> float | None:
    """A time back from now (``24h``, ``7d``) or an ISO-8601 time, as epoch seconds."""
    if not value:
        return None
    from engine.stats import since_epoch

    try:
        return since_epoch(value, time.time())
    except UsageError:
        raise UsageError(
            f"{name} {shown(value)} is neither a span (24h, 90m, 7d) nor an ISO-8601 time"
        ) from None


def position(value: str | None, name: str = "at") -> int | str | None:
    """A stream position (digits; the engine says when it is outside the run) or a
    checkpoint name."""
    checked = text(value, name)
    if checked is None or not (checked.isascii() and checked.isdigit()):
        return checked
    return int(checked)


MAX_KEY = 1000  # as ``runs --key`` takes one


def key(value: str | None, others: tuple[object, ...]) -> str | None:
    """A business key (``runs --key``): 1 to 1,000 characters, and no other filter."""
    if not value:
        return None
    if len(value) > MAX_KEY:
        raise UsageError(f"key takes a business key of 1 to {MAX_KEY} characters")
    if any(o is not None for o in others):
        raise UsageError("key takes no other filter: it lists every run that claimed the key")
    return value
