"""Business keys at prune time: a key past its TTL is recorded expired (``key_expired``
in its ledger stream, so it dedupes no more); a key inside its TTL keeps its stream (and
the blobs its result needs) whatever becomes of the runs that claimed it."""

from __future__ import annotations

import uuid
from collections.abc import Iterable

import msgspec

from ... import events as ev
from ...errors import ConcurrencyError
from ...store import Append, Store
from ..call import ledger

__all__ = ["KeyFate", "key_fate", "keys_of"]


class KeyFate(msgspec.Struct, frozen=True):
    """What a prune may do with a key: ``busy`` (an effect in flight: its runs stay),
    ``kept`` (inside its TTL, or no TTL: its stream stays) or ``expired`` (its stream may
    go once every run that claimed it is gone); ``claimers`` are those runs."""

    key: str
    stream: uuid.UUID
    fate: str
    claimers: frozenset[str] = frozenset()
    expire: Append | None = None  # the key_expired to record, if not recorded yet


def keys_of(events: Iterable[ev.Event]) -> set[str]:
    """The business keys a run's calls claimed."""
    return {e.key for e in events if isinstance(e, ev.ToolInvoked) and e.key}


def key_fate(store: Store, key: str, ttl: float | None, now: float) -> KeyFate:
    """What becomes of ``key``, read from its ledger stream at ``now``."""
    sid = ledger.stream_of(key)
    recs = store.read(sid)
    claimers = frozenset(r.event.run_id for r in recs if isinstance(r.event, ev.EffectClaimed))
    if not recs:
        return KeyFate(key, sid, "kept")
    last = recs[-1].event
    if isinstance(last, ev.KeyExpired):
        return KeyFate(key, sid, "expired", claimers)
    if isinstance(last, ev.EffectClaimed):
        return KeyFate(key, sid, "busy", claimers)
    if ttl is None or last.at + ttl > now:
        return KeyFate(key, sid, "kept", claimers)
    expired = ev.KeyExpired(at=now, key=key, ttl=ttl, last_at=last.at)
    return KeyFate(key, sid, "expired", claimers, Append(sid, recs[-1].position, expired))


def record_expiry(store: Store, fate: KeyFate) -> bool:
    """Append the key's ``key_expired`` (positions are 1-based: after its last event);
    False if the key moved meanwhile (a new claim: it is in use again)."""
    if fate.expire is None:
        return True
    a = fate.expire
    try:
        store.append([Append(a.stream, a.position + 1, a.event)])
    except ConcurrencyError:
        return False
    return True
