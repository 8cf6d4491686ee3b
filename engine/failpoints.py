"""Failpoints: ``AGENTLOG_FAILPOINTS=name[:n][,name[:n]]`` SIGKILLs this process the n-th
time (default the first) execution reaches a named point. Used by the crash campaign.

Points: ``after_intent`` (intent committed, tool not run), ``after_tool`` (tool returned,
outcome not committed), ``after_decision`` (a model call returned, its decision not
recorded), ``in_snapshot`` (events committed, snapshot being written),
``after_outcome`` (outcome committed), ``in_compensation`` (an undo ran, not recorded),
``in_view_batch`` (a projection's batch folded, not committed), ``in_view_commit`` (its
tracking row moved inside the transaction, its rows not yet written), ``in_group_commit``
(a SQLite group commit's batch written, not committed), ``in_prune`` (a run's events or
snapshots deleted inside its prune transaction, not committed), ``in_keycache_put`` (a
committed key read from the ledger, not yet written to the keycache).
"""

from __future__ import annotations

import os
import signal

_armed: dict[str, int] | None = None
_hits: dict[str, int] = {}


def _load() -> dict[str, int]:
    points: dict[str, int] = {}
    for part in os.environ.get("AGENTLOG_FAILPOINTS", "").split(","):
        name, _, nth = part.strip().partition(":")
        if name:
            points[name] = int(nth) if nth.isdigit() else 1
    return points


def hit(name: str) -> None:
    """Die with SIGKILL if ``name`` is armed and reached for the armed time."""
    global _armed
    if _armed is None:
        _armed = _load()
    if not _armed or name not in _armed:
        return
    _hits[name] = _hits.get(name, 0) + 1
    if _hits[name] == _armed[name]:
        os.kill(os.getpid(), signal.SIGKILL)


def reset() -> None:
    """Re-read the environment (for tests that arm failpoints in-process)."""
    global _armed
    _armed = None
    _hits.clear()
