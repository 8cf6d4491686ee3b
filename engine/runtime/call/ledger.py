"""The shared side-effect ledger: one stream per business key, claimed atomically.

A claim is the key stream's next event, appended in the same transaction as the run's
``tool_invoked``; a racing claimer's transaction fails on the version conflict and reads
the winner's claim. The same key with different arguments is refused as a permanent
error (the key names one effect; reusing it for another would silently drop that one).

A compensated effect frees its key for a new effect: the next claim is a new version of
the key and goes out under a versioned key (``sent_key``), recorded in the claim and the
intent, so a provider that dedupes on the key it receives makes a new effect instead of
returning the undone one. The business key still dedupes across runs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ... import events as ev
from ... import failpoints
from ...errors import AgentlogError, Permanent
from ...log.claims import COMPENSATED as COMPENSATED  # a release's reason: undone
from ...log.claims import key_stream
from ...polling import poll_until
from ...store import Append, Store
from ...store.keycache import Cached, KeyCache, cache_of, last_row, seal, unseal

stream_of = key_stream  # the ledger stream of a business key (one rule, in log.claims)


@dataclass(frozen=True)
class KeyState:
    """What the ledger says of a key now."""

    version: int  # the key stream's last position (0: never claimed)
    claim: ev.EffectClaimed | None  # the live claim, if claimed and not released
    committed: ev.EffectCommitted | None  # the effect's outcome, if it happened
    undone: int = 0  # effects under the key that were compensated (released as such)

    def owned_by(self, run_id: str, call: int) -> bool:
        return self.claim is not None and (self.claim.run_id, self.claim.call) == (run_id, call)


def _none() -> None:
    return None


def read(store: Store, key: str) -> KeyState:
    """What the ledger says of ``key``: a committed outcome from the store's keycache
    when it has one still naming the stream's last row, else read from the ledger."""
    cache = cache_of(store)
    if cache is None:
        return read_ledger(store, key)
    return keycache_read(store, cache, key)


def read_ledger(store: Store, key: str) -> KeyState:
    recs = store.read(stream_of(key))
    claim: ev.EffectClaimed | None = None
    committed: ev.EffectCommitted | None = None
    undone = 0
    for r in recs:
        e = r.event
        if isinstance(e, ev.EffectClaimed):
            claim, committed = e, None
        elif isinstance(e, ev.EffectCommitted):
            committed = e
        elif isinstance(e, ev.EffectReleased):
            claim, committed = None, None
            undone += e.reason == COMPENSATED
        elif isinstance(e, ev.KeyExpired):  # past its TTL: the key names no effect now
            claim, committed = None, None
    # its last position, not its length: a claim read before a prune deleted the stream
    # lands after a gap
    return KeyState(recs[-1].position if recs else 0, claim, committed, undone)


def keycache_read(store: Store, cache: KeyCache, key: str) -> KeyState:
    """The ledger read through the store's keycache: a committed key answered from Redis
    when the entry still names the key stream's last row; anything else (a miss, a stale
    entry, Redis down, an entry that does not open) reads the ledger. Only committed
    states are cached, and only once read back from the store (durable)."""
    stream = stream_of(key)
    entry = cache.get(stream)
    if entry is not None:
        position, digest = last_row(store, stream)
        if (position, digest) == (entry.position, entry.digest):
            try:
                claim = (
                    None if entry.claim is None else unseal(store, stream, position, entry.claim)
                )
                done = unseal(store, stream, position, entry.committed)
                return KeyState(position, claim, done, entry.undone)
            except (AgentlogError, ValueError, TypeError):
                pass  # an entry that does not open: the ledger decides
    state = read_ledger(store, key)
    if state.committed is not None:  # read back from the store: durable
        position, digest = last_row(store, stream)
        if position == state.version:  # nothing appended since the read
            claim = None if state.claim is None else seal(store, stream, position, state.claim)
            done = seal(store, stream, position, state.committed)
            failpoints.hit("in_keycache_put")  # read back committed, not cached yet
            cache.put(stream, Cached(position, digest, claim, done, state.undone))
    return state


def sent_key(key: str, state: KeyState) -> str | None:
    """The key a new claim's request goes out under, if not ``key`` itself: after ``n``
    compensated effects, ``key#v<n+1>`` (the providers' copies of the undone effects keep
    their keys, so a re-send under one would return the undone effect)."""
    return f"{key}#v{state.undone + 1}" if state.undone else None


def check_args(state: KeyState, key: str, ahash: str) -> None:
    if state.claim is not None and state.claim.args_hash and state.claim.args_hash != ahash:
        raise Permanent(
            f"idempotency key {key!r} was already used by run {state.claim.run_id} "
            "with different arguments"
        )


def claim_event(
    key: str,
    version: int,
    run_id: str,
    call: int,
    ahash: str,
    sent: str | None = None,
    *,
    at: float,
) -> Append:
    """Claim ``key``, whose stream is at ``version``, for ``call`` of ``run_id`` at ``at``
    (its request going out under ``sent``, a versioned key, when given)."""
    e = ev.EffectClaimed(at=at, key=key, run_id=run_id, call=call, args_hash=ahash, sent_key=sent)
    return Append(stream_of(key), version + 1, e)


def commit_event(
    key: str, version: int, run_id: str, call: int, result: object, *, at: float
) -> Append:
    """Record that the effect under ``key`` happened, with ``result`` (recorded at ``at``)."""
    e = ev.EffectCommitted(at=at, key=key, run_id=run_id, call=call, result=result)
    return Append(stream_of(key), version + 1, e)


def release_event(
    key: str, version: int, run_id: str, call: int, reason: str, *, at: float
) -> Append:
    """Free ``key`` at ``at``: the effect did not happen (or was undone)."""
    e = ev.EffectReleased(at=at, key=key, run_id=run_id, call=call, reason=reason)
    return Append(stream_of(key), version + 1, e)


def wait_settled(
    store: Store, key: str, seconds: float, poll: float = 0.05, first: Callable[[], None] = _none
) -> KeyState:
    """Wait (at most ``seconds``) for another claimer's effect to commit or be released;
    ``first`` before each look (the waiting run's own deferred commit of the key, if any:
    another call of an async agent's holds it)."""

    def settled() -> KeyState | None:
        first()
        state = read(store, key)
        return state if state.claim is None or state.committed is not None else None

    return poll_until(settled, seconds, first=poll, most=poll) or read(store, key)
