"""The runs view (placeholder: its fold is being written)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence

import msgspec

from engine.stats import RunCounts
from engine.store import Store

from ..fold import Envelope, Projection


class Row(msgspec.Struct, frozen=True):
    key: str


class View(Projection[Row]):
    name = "runs"
    version = "0"
    row = Row

    def keys(self, env: Envelope) -> Sequence[str]:
        return ()

    def apply(self, rows: Mapping[str, Row | None], env: Envelope) -> Mapping[str, Row | None]:
        return {}


# --- STAND-IN (i12-stats): replaced at merge by the runs view's own counts() -------------


def counts(store: Store, since: float | None, agent: str | None) -> RunCounts:
    """STAND-IN until the runs view lands: counts from the engine's run index."""
    found = [
        r
        for r in store.runs()
        if (since is None or r.started_at >= since) and (agent is None or r.agent == agent)
    ]
    return RunCounts(len(found), dict(Counter(r.status for r in found)))
