"""A business key's fate at prune time: an effect in flight keeps its runs, a key inside
its TTL (or with none) keeps its stream, a key past it is recorded ``key_expired`` once
and then reads as free."""

from __future__ import annotations

import time

from engine import events as ev
from engine.runtime.call import ledger
from engine.runtime.retention.keys import key_fate, record_expiry
from engine.store import Append, Store

T = 1_000_000.0


def _write(store: Store, key: str, *events: ev.Event) -> None:
    sid = ledger.stream_of(key)
    for e in events:
        store.append([Append(sid, store.last_position(sid) + 1, e)])


def test_a_key_past_its_ttl_is_recorded_expired_once_and_is_free(store: Store) -> None:
    _write(
        store,
        "k",
        ev.EffectClaimed(at=T, key="k", run_id="r1", call=3),
        ev.EffectCommitted(at=T + 1, key="k", run_id="r1", call=3, result="done"),
    )
    assert key_fate(store, "k", None, T + 10**9).fate == "kept"  # no TTL: forever
    assert key_fate(store, "k", 100.0, T + 50).fate == "kept"  # inside its TTL
    fate = key_fate(store, "k", 100.0, T + 200)
    assert (fate.fate, fate.claimers) == ("expired", frozenset({"r1"}))
    assert ledger.read(store, "k").committed is not None  # nothing written yet
    assert record_expiry(store, fate)
    [last] = store.read(ledger.stream_of("k"), after=2)
    assert isinstance(last.event, ev.KeyExpired) and last.event.last_at == T + 1
    state = ledger.read(store, "k")
    assert state.claim is None and state.committed is None  # it dedupes no more
    again = key_fate(store, "k", 100.0, T + 300)
    assert again.fate == "expired" and again.expire is None  # recorded once


def test_a_claim_without_an_outcome_is_busy_and_a_moved_key_is_not_expired(
    store: Store,
) -> None:
    _write(store, "b", ev.EffectClaimed(at=T, key="b", run_id="r2", call=1))
    assert key_fate(store, "b", 1.0, T + 10**6).fate == "busy"
    _write(store, "m", ev.EffectReleased(at=T, key="m", run_id="r3", call=1))
    fate = key_fate(store, "m", 1.0, T + 10)
    _write(store, "m", ev.EffectClaimed(at=T + 5, key="m", run_id="r4", call=1))
    assert not record_expiry(store, fate)  # claimed again meanwhile: left as it is


def test_a_key_stream_claimed_again_after_its_prune_reads_its_last_position(
    store: Store,
) -> None:
    """A run that read an expired key just before a prune deleted its stream claims it
    at the position it read (after a gap): the key's version is its last position, so
    the next claim, and an expiry, go after the events already there, not before them
    in the stream's order."""
    sid = ledger.stream_of("g")
    store.append([Append(sid, 5, ev.EffectClaimed(at=T, key="g", run_id="r5", call=1))])
    store.append([Append(sid, 6, ev.EffectReleased(at=T, key="g", run_id="r5", call=1))])
    state = ledger.read(store, "g")
    assert state.version == 6
    store.append([ledger.claim_event("g", state.version, "r6", 1, "h", at=time.time())])
    claim = ledger.read(store, "g").claim
    assert claim is not None and claim.run_id == "r6"
    store.append([Append(sid, 8, ev.EffectReleased(at=T, key="g", run_id="r6", call=1))])
    fate = key_fate(store, "g", 1.0, T + 10)
    assert record_expiry(store, fate)
    assert isinstance(store.read(sid)[-1].event, ev.KeyExpired)
