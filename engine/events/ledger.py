"""The events of the shared side-effect ledger, one stream per business key: claimed,
committed, released, expired (re-exported by :mod:`engine.events`)."""

from __future__ import annotations

from typing import Any

from .base import Event

__all__ = ["AnyLedgerEvent", "EffectClaimed", "EffectCommitted", "EffectReleased", "KeyExpired"]

# --- the side-effect ledger (one stream per effect key) --------------------------------


class EffectClaimed(Event, frozen=True, tag="effect_claimed"):
    key: str
    run_id: str
    call: int
    args_hash: str = ""
    sent_key: str | None = None  # the claim's versioned key, after a compensated effect


class EffectCommitted(Event, frozen=True, tag="effect_committed"):
    key: str
    run_id: str
    call: int
    result: Any = None


class EffectReleased(Event, frozen=True, tag="effect_released"):
    key: str
    run_id: str
    call: int
    reason: str = ""


class KeyExpired(Event, frozen=True, tag="key_expired"):
    """The key's time to live passed (``Engine.open(url, key_ttl=...)``): it is free
    again, and prune may delete its stream with the last run that claimed it."""

    key: str
    ttl: float  # seconds the key was kept after its last claim, commit or release
    last_at: float  # when that last event was recorded


AnyLedgerEvent = EffectClaimed | EffectCommitted | EffectReleased | KeyExpired
