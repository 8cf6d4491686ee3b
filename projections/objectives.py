"""Recovery objectives per agent (``engine.stats().objectives``): the RPO each agent was
declared with against the tails its recoveries folded again, and its crashes' RTO.

The recovery view holds, per run, the target its start recorded, each crash's time to
recover and the tail its resume found past the newest snapshot. A run of an agent with
a target that is not settled is measured at its head as well: the snapshot and tail a
recovery would read now (one snapshot read and a tail of at most the target).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence

from engine import events as ev
from engine.errors import CorruptData
from engine.kinds import SETTLED
from engine.log.history import rebuild, run_stream
from engine.log.rpo import Rpo, replay_tail
from engine.stats import Objectives
from engine.store import Store

from .views.recovery import Row


def objectives(store: Store, rows: Sequence[Row]) -> list[Objectives]:
    """One entry per agent among ``rows`` (ordered by start) with a target or a crash."""
    by_agent: dict[str, list[Row]] = {}
    for r in rows:
        by_agent.setdefault(r.agent, []).append(r)
    out = []
    for agent, runs in sorted(by_agent.items()):
        target = _target(runs)
        tails = [t for r in runs for t in r.replayed]
        if target is not None:
            tails += [t for t in (_head(store, r) for r in runs) if t is not None]
        rto, down = [s for r in runs for s in r.rto], [s for r in runs for s in r.down]
        if target is None and not tails and not down:
            continue
        out.append(_figures(agent, target, tails, rto, down))
    return out


def _target(runs: Sequence[Row]) -> Rpo | None:
    """The target of the latest run started with one."""
    for r in reversed(runs):
        if r.rpo_calls is not None or r.rpo_s is not None:
            return Rpo(calls=r.rpo_calls, seconds=None if r.rpo_calls is not None else r.rpo_s)
    return None


def _head(store: Store, row: Row) -> ev.Replayed | None:
    """The tail a recovery of ``row``'s run would fold now (None: settled, or its log is
    damaged, which the commands that read it report)."""
    if row.status in SETTLED or (row.rpo_calls is None and row.rpo_s is None):
        return None
    try:
        head = rebuild(store, row.key)
        tail = replay_tail(store, run_stream(row.key), head)
    except CorruptData:
        return None
    return tail


def _figures(
    agent: str,
    target: Rpo | None,
    tails: Sequence[ev.Replayed],
    rto: Sequence[float],
    down: Sequence[float],
) -> Objectives:
    events = [max(0, t.events) for t in tails]
    calls = [max(0, t.calls) for t in tails]
    seconds = [max(0.0, t.seconds) for t in tails if math.isfinite(t.seconds)]
    met = None
    if target is not None and tails:
        met = (
            max(calls) <= target.calls
            if target.calls is not None
            else max(seconds, default=0.0) <= (target.seconds or 0.0)
        )
    return Objectives(
        agent=agent,
        rpo_target=None if target is None else str(target),
        rpo_target_calls=None if target is None else target.calls,
        rpo_target_s=None if target is None else target.seconds,
        rpo_samples=len(tails),
        rpo_events_median=_median(events),
        rpo_events_max=max(events, default=None),
        rpo_calls_median=_median(calls),
        rpo_calls_max=max(calls, default=None),
        rpo_s_median=_median(seconds),
        rpo_s_max=max(seconds, default=None),
        rpo_met=met,
        rto_samples=len(rto),
        rto_s_median=_median(rto),
        rto_s_p95=_p95(rto),
        down_s_median=_median(down),
        down_s_p95=_p95(down),
    )


def _median(values: Iterable[float]) -> float | None:
    listed = list(values)
    return float(statistics.median(listed)) if listed else None


def _p95(values: Sequence[float]) -> float | None:
    """The nearest-rank 95th percentile."""
    if not values:
        return None
    ranked = sorted(values)
    return ranked[max(0, math.ceil(0.95 * len(ranked)) - 1)]
