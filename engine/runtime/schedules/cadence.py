"""When a schedule fires, pure: its cadence (a cron expression, or every N seconds), the
ticks in a span of time, the ones due now, and each tick's run id.

Times are epoch seconds in UTC (no time zone, so no daylight-saving gaps). Ticks are
whole seconds: ``every=N`` fires at the multiples of N seconds since the epoch, so every
worker computes the same ticks whatever its start; a cron expression (five fields, as
Debian's cron reads them, evaluated by cronsim) fires at its minutes. A tick's run id
is ``NAME@<tick as ISO-8601 UTC>``: the tick is the run's identity, so enqueueing it
twice (two workers, a restart) starts one run.
"""

from __future__ import annotations

import datetime as dt
import math

import msgspec
from cronsim import CronSim, CronSimError

from ...errors import UsageError

UTC = dt.UTC
MAX_EVERY = 366 * 24 * 3600  # a year: longer is a job for a calendar, not a schedule
MAX_CRON = 200  # characters
# The most ticks one look at a schedule enqueues: a catch-up after a long outage starts
# the latest MAX_TICKS missed ticks, never an unbounded backlog.
MAX_TICKS = 100
TICK_FORMAT = "%Y-%m-%dT%H:%M:%SZ"

__all__ = [
    "MAX_TICKS",
    "Cadence",
    "cadence",
    "due",
    "latest_ticks",
    "next_tick",
    "parse_tick",
    "tick_id",
    "tick_text",
]


class Cadence(msgspec.Struct, frozen=True):
    """How often a schedule fires: ``cron`` (five fields) or ``every`` seconds, one of them."""

    cron: str | None = None
    every: int | None = None

    def describe(self) -> str:
        return f"cron {self.cron!r}" if self.cron is not None else f"every {self.every}s"


def cadence(cron: object = None, every: object = None) -> Cadence:
    """The cadence ``cron`` or ``every`` names (exactly one of them); one ``UsageError``
    for a bad expression, an interval that is not a whole number of seconds from 1 to a
    year, or a cron expression that never fires."""
    if (cron is None) == (every is None):
        raise UsageError("a schedule fires on a cron expression or every N seconds: give one")
    if every is not None:
        return Cadence(every=_every(every))
    if not isinstance(cron, str):
        raise UsageError(f"a cron expression is a string, not {type(cron).__name__}")
    expr = " ".join(cron.split())
    if not expr or len(expr) > MAX_CRON or not cron.isprintable():
        raise UsageError(f"not a cron expression: {cron[:60]!r} (five fields, as crontab(5))")
    if len(expr.split()) != 5:
        raise UsageError(
            f"cron expression {expr!r} is not five fields (minute hour day-of-month month "
            f"day-of-week): it has {len(expr.split())}"
        )
    try:
        CronSim(expr, dt.datetime(2000, 1, 1, tzinfo=UTC))
    except (CronSimError, ValueError, IndexError) as e:
        raise UsageError(f"cron expression {expr!r} does not read: {e}") from None
    found = Cadence(cron=expr)
    if next_tick(found, 0.0) is None:
        raise UsageError(f"cron expression {expr!r} never fires")
    return found


def _every(every: object) -> int:
    if isinstance(every, float) and every.is_integer():
        every = int(every)
    if isinstance(every, bool) or not isinstance(every, int):
        raise UsageError(f"every is a whole number of seconds, not {every!r}")
    if not 1 <= every <= MAX_EVERY:
        raise UsageError(f"every is 1 to {MAX_EVERY} seconds (a year), not {every}")
    return every


def _moment(t: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(math.floor(t), UTC)


def next_tick(c: Cadence, after: float) -> float | None:
    """The first tick later than ``after``; None if the cron expression fires no more
    (cronsim looks fifty years ahead)."""
    if c.every is not None:
        return float((math.floor(after / c.every) + 1) * c.every)
    assert c.cron is not None
    try:
        return next(CronSim(c.cron, _moment(after))).timestamp()
    except (StopIteration, OverflowError, ValueError):
        return None


def latest_ticks(c: Cadence, after: float, upto: float, limit: int) -> list[float]:
    """The latest ``limit`` ticks ``t`` with ``after < t <= upto``, oldest first."""
    if limit <= 0 or upto <= after:
        return []
    if c.every is not None:
        last = math.floor(upto / c.every)
        first = max(math.floor(after / c.every) + 1, last - limit + 1)
        return [float(k * c.every) for k in range(first, last + 1)]
    assert c.cron is not None
    found: list[float] = []
    # Backwards from just past ``upto``: the ticks at or before it, latest first.
    for moment in CronSim(c.cron, _moment(upto) + dt.timedelta(seconds=1), reverse=True):
        t = moment.timestamp()
        if t <= after or len(found) == limit:
            break
        found.append(t)
    return found[::-1]


def due(
    c: Cadence, *, last: float, now: float, watched_since: float | None, catch_up: bool
) -> list[float]:
    """The ticks to enqueue now, oldest first, given the last tick any worker handled (or
    when the schedule was made) and since when this worker has been watching it (None:
    it looks for the first time). Every tick after ``watched_since`` came while this
    worker ran: all are due, even those before ``last`` (a worker that came back may
    have enqueued only its latest missed tick; enqueueing a tick twice starts one run).
    Of the ticks before, missed while no worker ran, only the latest is due, or all with
    ``catch_up``. At most ``MAX_TICKS``."""
    seen: list[float] = []
    missed_upto = now
    if watched_since is not None:
        seen = latest_ticks(c, watched_since, now, MAX_TICKS)
        missed_upto = min(now, watched_since)
    missed = latest_ticks(c, last, missed_upto, MAX_TICKS if catch_up else 1)
    return sorted({*missed, *seen})[-MAX_TICKS:]


def tick_text(tick: float) -> str:
    """A tick as ISO-8601 UTC to the second: ``2026-12-03T02:00:00Z``."""
    return _moment(tick).strftime(TICK_FORMAT)


def parse_tick(text: str) -> float | None:
    """The tick ``text`` (as :func:`tick_text` writes it) names; None if it names none."""
    try:
        return dt.datetime.strptime(text, TICK_FORMAT).replace(tzinfo=UTC).timestamp()
    except ValueError:
        return None


def tick_id(name: str, tick: float) -> str:
    """The run id of the schedule ``name``'s run at ``tick``: ``NAME@<tick>``."""
    return f"{name}@{tick_text(tick)}"
