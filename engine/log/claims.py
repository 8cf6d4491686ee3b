"""Who claimed a business key, and how each claim ended: the ledger stream of a key read
as a list of claims, for ``agentlog runs --key`` (the runtime's own reading of a key's
live claim is ``engine.runtime.call.ledger.read``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from .. import events as ev
from ..kinds import KeyOutcome
from ..store import Store, stream_id

COMPENSATED = "compensated"  # a release's reason when the effect was undone


def key_stream(key: str) -> uuid.UUID:
    """The ledger stream of business key ``key``."""
    return stream_id("effect:" + key)


@dataclass(frozen=True)
class KeyClaim:
    """One claim of a key: the run and call that claimed it, when, and how it ended."""

    key: str
    run_id: str
    call: int
    claimed_at: float
    outcome: KeyOutcome
    settled_at: float | None = None
    sent_key: str | None = None


def claims(store: Store, key: str) -> list[KeyClaim]:
    """Every claim of ``key``, oldest first; an empty list when it was never claimed."""
    found: list[KeyClaim] = []
    for r in store.read(key_stream(key)):
        e = r.event
        if isinstance(e, ev.EffectClaimed):
            found.append(
                KeyClaim(e.key, e.run_id, e.call, e.at, KeyOutcome.PENDING, sent_key=e.sent_key)
            )
        elif found and isinstance(e, ev.EffectCommitted | ev.EffectReleased):
            outcome = KeyOutcome.COMMITTED
            if isinstance(e, ev.EffectReleased):
                undone = e.reason == COMPENSATED
                outcome = KeyOutcome.COMPENSATED if undone else KeyOutcome.RELEASED
            found[-1] = replace(found[-1], outcome=outcome, settled_at=e.at)
    return found
