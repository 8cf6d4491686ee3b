"""A business key's fate at prune time: an effect in flight keeps its runs, a key inside
its TTL (or with none) keeps its stream, a key past it is recorded ``key_expired`` once
and then reads as free."""

from __future__ import annotations

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
