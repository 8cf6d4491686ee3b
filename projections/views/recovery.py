"""The recovery view (placeholder: its fold is being written)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import msgspec

from engine.stats import RecoveryStats
from engine.store import Store

from ..fold import Envelope, Projection


class Row(msgspec.Struct, frozen=True):
    key: str


class View(Projection[Row]):
    name = "recovery"
    version = "0"
    row = Row

    def keys(self, env: Envelope) -> Sequence[str]:
        return ()

    def apply(self, rows: Mapping[str, Row | None], env: Envelope) -> Mapping[str, Row | None]:
        return {}


# --- STAND-IN (i12-stats): replaced at merge by the recovery view's own summarize() ------


def summarize(store: Store, since: float | None, agent: str | None) -> RecoveryStats:
    """STAND-IN until the recovery view lands: no crashes."""
    return RecoveryStats()
