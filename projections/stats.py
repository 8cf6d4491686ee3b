"""The operator's figures (``engine.stats()``, ``agentlog stats``), read from the views
after bringing them up to date (placeholder: being written)."""

from __future__ import annotations

from engine.stats import RecoveryStats, RunCounts, Stats
from engine.store import Store


def stats(store: Store, since: float | None, agent: str | None) -> Stats:
    return Stats(since=None, runs=RunCounts(), tools=[], recovery=RecoveryStats(), agent=agent)
