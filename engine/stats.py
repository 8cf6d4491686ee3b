"""The operator's figures across runs (``engine.stats()``, ``agentlog stats --json``):
their shape, and the port that computes them.

The figures come from projections (``projections/``), which the engine never imports:
the ``agentlog.views`` entry point of the installed distribution names the provider, so
``engine.stats()`` reaches up through a declared seam, not an import.
"""

from __future__ import annotations

import datetime as dt
import functools
import re
from typing import Protocol

import msgspec

from .errors import UsageError
from .kinds import CircuitState
from .store import Store

ENTRY_GROUP = "agentlog.views"
_SPAN = re.compile(r"([0-9]+(?:\.[0-9]+)?)\s*([smhdw])")  # ASCII digits only
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
# The epochs a ``since`` may have: what an aware datetime can hold, years 1 to 9999.
_FIRST = dt.datetime.min.replace(tzinfo=dt.UTC).timestamp()
_LAST = dt.datetime(9999, 12, 31, 23, 59, 59, tzinfo=dt.UTC).timestamp()


class RunCounts(msgspec.Struct, frozen=True):
    total: int = 0
    by_status: dict[str, int] = {}


class ToolStats(msgspec.Struct, frozen=True):
    """One tool's calls in the period. Latencies are of attempts, in milliseconds. The
    period is whole clock hours: events are counted by the hour they happened in, from
    the hour ``since`` falls in (``Stats.tools_since``), whenever their run started."""

    tool: str
    calls: int = 0
    failures: dict[str, int] = {}  # failure kind -> final failures of that kind
    retries: int = 0
    p50_ms: float | None = None
    p95_ms: float | None = None
    breaker: CircuitState = CircuitState.CLOSED  # the breaker's last recorded state
    p99_ms: float | None = None
    mean_ms: float | None = None
    stdev_ms: float | None = None
    fallbacks: int = 0
    breaker_transitions: int = 0
    effects_sent: int = 0
    effects_deduplicated: int = 0  # answered by the ledger, not sent again
    uncertain: dict[str, int] = {}  # how uncertain outcomes were resolved -> count
    attempts: int = 0  # executions of the tool, failed or not
    effects_reused: int = 0  # a rewound fork taking over its parent's effect (not sent)
    attempt_failures: dict[str, int] = {}  # failure kind -> failed attempts of that kind


class ActionStats(msgspec.Struct, frozen=True):
    """One graded-recovery action (``recovery_decided.action``): how often it was chosen,
    how often the run then completed with no other recovery after it, and that share."""

    decided: int = 0
    recovered: int = 0
    success_rate: float | None = None


class RecoveryStats(msgspec.Struct, frozen=True):
    crashes: int = 0  # resumes after an owner died mid-run (a run may crash twice)
    recovered: int = 0  # of those, resumed runs that went on to complete
    recovery_success_rate: float | None = None
    mean_time_to_recover_s: float | None = None  # RTO: last event before the crash -> resume
    mean_lost_calls_per_crash: float | None = (
        None  # RPO: committed intents with no outcome at the crash
    )
    mean_checkpoint_save_ms: float | None = None
    failure_rate: float | None = None  # failed runs / ended runs
    compensations: int = 0
    compensations_failed: int = 0
    mean_snapshot_save_ms: float | None = None
    crashed_runs: int = 0  # runs with at least one crash (``crashes`` counts each crash)
    lost_calls: int = 0  # calls in flight at the crashes, in all
    calls_reexecuted: int = 0  # of those, run again after the resume (not verified)
    ended_runs: int = 0  # completed, failed or abandoned (failure_rate's denominator)
    failed_runs: int = 0
    actions: dict[str, ActionStats] = {}  # graded recovery per action (retry, replan, ...)


class Objectives(msgspec.Struct, frozen=True):
    """One agent's recovery objectives against what was measured (``Stats.objectives``).

    RPO, the work a recovery folds again past the run's newest snapshot, is measured at
    every crash (by the resume: ``agent_resumed.replayed``) and, for the unsettled runs of
    an agent with a target, at the current head: ``rpo_samples`` of them, as events,
    calls begun and seconds of recorded work (median and max). RTO is per crash, from
    the resume's start (before it reads the log) to its first commit, the run running
    again (``agent_resumed.recovery_s``; median and p95 of ``rto_samples``); ``down_s``
    is from the run's last event before the crash to the resume (detection included).
    The target is that of the agent's latest run started with one
    (``@engine.agent(rpo=...)``); ``rpo_met``: every sample within it (None: no target
    or no sample)."""

    agent: str
    rpo_target: str | None = None  # as declared: "20 calls" or "30s"
    rpo_target_calls: int | None = None
    rpo_target_s: float | None = None
    rpo_samples: int = 0
    rpo_events_median: float | None = None
    rpo_events_max: int | None = None
    rpo_calls_median: float | None = None
    rpo_calls_max: int | None = None
    rpo_s_median: float | None = None
    rpo_s_max: float | None = None
    rpo_met: bool | None = None
    rto_samples: int = 0
    rto_s_median: float | None = None
    rto_s_p95: float | None = None
    down_s_median: float | None = None
    down_s_p95: float | None = None


class Stats(msgspec.Struct, frozen=True):
    """``stats --json``; fields may be added, never removed. ``runs`` and ``recovery``
    count the runs started at or after ``since``; ``tools`` counts tool events by the
    clock hour they happened in, from ``tools_since`` (the start of the hour ``since``
    falls in; None: all time), so calls of runs started earlier in that hour are in."""

    since: str | None
    runs: RunCounts
    tools: list[ToolStats]
    recovery: RecoveryStats
    agent: str | None = None
    tools_since: str | None = None  # ISO-8601 UTC start of the first hour ``tools`` covers
    # Per agent with an RPO target or a measured crash, by agent name (Objectives).
    objectives: list[Objectives] = []


class StatsSource(Protocol):
    """What computes the figures (the projections' provider)."""

    def __call__(self, store: Store, since: float | None, agent: str | None) -> Stats: ...


def since_epoch(since: float | str | dt.datetime | dt.timedelta | None, now: float) -> float | None:
    """``since`` as epoch seconds: an epoch, a datetime, a span back from ``now``
    (a timedelta, or ``"24h"``, ``"90m"``, ``"7d"``, ``"1h30m"``), or an ISO-8601 time.
    A time no UTC datetime can name (NaN, beyond the years 1-9999) is refused."""
    if since is None:
        return None
    bound = _since_epoch(since, now)
    if not _FIRST <= bound <= _LAST:  # False for NaN too
        raise UsageError(f"since: {str(since)[:40]!r} is not a time between the years 1 and 9999")
    return bound


def _since_epoch(since: float | str | dt.datetime | dt.timedelta, now: float) -> float:
    if isinstance(since, bool):
        raise UsageError(f"since: not a time: {since!r}")
    if isinstance(since, int | float):
        return float(since)
    if isinstance(since, dt.timedelta):
        return now - since.total_seconds()
    if isinstance(since, dt.datetime):
        aware = since if since.tzinfo else since.replace(tzinfo=dt.UTC)
        return aware.timestamp()  # never raises: beyond the years 1-9999 is refused after
    return _parse_since(str(since), now)


def _parse_since(text: str, now: float) -> float:
    compact = text.strip().lower().replace(" ", "")
    parts = _SPAN.findall(compact)
    if parts and "".join(n + u for n, u in parts) == compact:
        return now - sum(float(n) * _UNIT[u] for n, u in parts)
    try:
        return _since_epoch(dt.datetime.fromisoformat(text.strip()), now)
    except ValueError:
        raise UsageError(
            f"since: {text[:40]!r} is neither a span (24h, 90m, 7d) nor an ISO-8601 time"
        ) from None


def span_seconds(span: float | str | dt.timedelta, what: str, *, zero: bool = False) -> float:
    """A span of time as seconds above 0 (or 0 too, with ``zero``): a number of seconds, a
    timedelta, or text such as ``"30d"``, ``"12h"``, ``"1h30m"``; anything else is one
    UsageError naming ``what``."""
    if isinstance(span, dt.timedelta):
        span = span.total_seconds()
    if isinstance(span, int | float) and not isinstance(span, bool):
        seconds = float(span)
    else:
        compact = str(span).strip().lower().replace(" ", "")
        parts = _SPAN.findall(compact)
        if not parts or "".join(n + u for n, u in parts) != compact:
            raise UsageError(f"{what}: {str(span)[:40]!r} is not a span (30d, 12h, 90m, 1h30m)")
        seconds = sum(float(n) * _UNIT[u] for n, u in parts)
    low_ok = seconds >= 0 if zero else seconds > 0
    if not low_ok or not seconds < _LAST - _FIRST:  # False for NaN too
        least = "0 or more" if zero else "above 0"
        raise UsageError(f"{what}: {str(span)[:40]!r} is not a span of time {least}")
    return seconds


@functools.cache
def source() -> StatsSource:
    """The installed provider of the figures (the ``agentlog.views`` entry point), looked
    up once per process (a metrics scrape does not rescan the installed packages).
    importlib.metadata loads here, not at import: the reading commands never pay for it."""
    import importlib.metadata

    found = importlib.metadata.entry_points(group=ENTRY_GROUP, name="stats")
    for entry in found:
        provider: StatsSource = entry.load()
        return provider
    raise UsageError("no provider of stats is installed (the agentlog.views entry point)")
