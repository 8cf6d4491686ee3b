"""A Redis cache of committed business-key outcomes in front of the ledger (``?keycache=``).

The database stays the truth. An entry is the ledger's committed state of a key, written
only from a state read back from the store (durable by then), and it names the key
stream's last row: its position and the SHA-256 of its stored bytes. A lookup is answered
only when the stream's last row is still that row (one indexed row, not decoded): a
release, a compensation, an expiry or a new claim appends a row, and a pruned and
re-claimed stream has other bytes, so a stale entry is a miss, never an answer. A miss,
a flushed cache or Redis down means the ledger is read as without a cache; Redis
unreachable is warned about once per process and retried after a pause.

The cached value holds the ledger's events as the store holds them: sealed with the
store's cipher when the store is sealed, so Redis sees nothing the database would not.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
import weakref
from typing import TYPE_CHECKING, Any

import msgspec

from .cipher import Row
from .codec import decode_event, encode_event

if TYPE_CHECKING:
    from .base import Store

__all__ = ["Cached", "KeyCache", "attach", "cache_of"]

_log = logging.getLogger("agentlog.keycache")
PAUSE = 5.0  # seconds without trying Redis after it failed
_warned = False
_warn_lock = threading.Lock()


class Cached(msgspec.Struct, frozen=True):
    """A committed key's ledger state: the claim and commit events (topic, payload) and
    how many effects under the key were undone, at the stream's last ``position``."""

    position: int
    digest: bytes  # SHA-256 of the last row's stored bytes
    claim: tuple[str, bytes] | None
    committed: tuple[str, bytes]
    undone: int = 0


_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(Cached)


class KeyCache:
    """One Redis database, reached lazily (``redis`` is imported only here)."""

    def __init__(self, url: str, name: str, prefix: str = "agentlog:key:") -> None:
        import redis  # the agentlog[keycache] extra

        self.name = name  # the URL with any password masked
        self.prefix = prefix
        self._client: Any = redis.Redis.from_url(
            url, socket_connect_timeout=0.25, socket_timeout=0.25
        )
        self._down_until = 0.0

    def _call(self, op: str, *args: Any) -> Any:
        if time.monotonic() < self._down_until:
            return None
        try:
            return getattr(self._client, op)(*args)
        except Exception as e:  # never fail a run because of the cache
            self._down_until = time.monotonic() + PAUSE
            _warn_once(self.name, e)
            return None

    def get(self, stream: uuid.UUID) -> Cached | None:
        data = self._call("get", self.prefix + stream.hex)
        if not isinstance(data, bytes):
            return None
        try:
            return _decoder.decode(data)
        except msgspec.DecodeError:
            return None

    def put(self, stream: uuid.UUID, entry: Cached) -> None:
        self._call("set", self.prefix + stream.hex, _encoder.encode(entry))

    def close(self) -> None:
        self._call("close")


def _warn_once(name: str, e: Exception) -> None:
    global _warned
    with _warn_lock:
        if _warned:
            return
        _warned = True
    _log.warning("keycache %s unreachable (%s): reading the ledger", name, type(e).__name__)


_caches: weakref.WeakKeyDictionary[Store, KeyCache] = weakref.WeakKeyDictionary()


def attach(store: Store, cache: KeyCache) -> None:
    _caches[store] = cache


def cache_of(store: Store) -> KeyCache | None:
    return _caches.get(store)


def last_row(store: Store, stream: uuid.UUID) -> tuple[int, bytes]:
    """The stream's last position and the SHA-256 of that row's stored bytes."""
    with store._translated():
        rows = store._events.select_events(stream, desc=True, limit=1)
    if not rows:
        return 0, b""
    return rows[0].originator_version, hashlib.sha256(rows[0].state).digest()


def seal(store: Store, stream: uuid.UUID, position: int, event: Any) -> tuple[str, bytes]:
    topic, payload = encode_event(event)
    return topic, store.rows.seal(Row("keycache", stream, position, topic), payload)


def unseal(store: Store, stream: uuid.UUID, position: int, item: tuple[str, bytes]) -> Any:
    topic, payload = item
    return decode_event(
        topic, store.rows.unseal(store.name, Row("keycache", stream, position, topic), payload)
    )
