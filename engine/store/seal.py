"""Whether a store is sealed (encrypted at rest), recorded in the store itself.

The first writer with ``AGENTLOG_CIPHER_KEY`` that opens an empty store writes one seal
row (in the blobs table, at a fixed stream no content hashes to), sealed with its key.
From then on a store without the key, or with another key, is refused when it is opened,
before anything is written: no writer can mix clear rows into a sealed store.
"""

from __future__ import annotations

import contextlib

from eventsourcing.persistence import StoredEvent

from ..errors import CipherError, ConcurrencyError
from .base import Store, stream_id
from .cipher import CIPHER_ENV, Row

SEAL_STREAM = stream_id("agentlog:seal")
_ROW = Row("blobs", SEAL_STREAM, 1, "seal")
_TEXT = b"agentlog sealed store"


def check_seal(store: Store, *, write: bool) -> None:
    """Refuse ``store`` (a :class:`CipherError`) when its settings do not match its seal:
    a sealed store opened without the key or with another one, or a key given for a
    store already written in clear. ``write``: seal an empty store opened with a key."""
    with store._translated():
        rows = store._blobs.select_events(SEAL_STREAM, limit=1)
    if rows:
        _opens(store, rows[0].state)
    elif store.encrypted and write:
        if store.max_global_position() > 0:
            raise CipherError(
                f"{store.name}: {CIPHER_ENV} is set, but this store was written in clear "
                "and is not sealed: unset it (or open with ?cipher=none), or export its "
                "runs and import them into a new store opened with the key"
            )
        with contextlib.suppress(ConcurrencyError), store._translated():  # a racing sealer
            store._blobs.insert_events([seal_row(store)])


def seal_row(store: Store) -> StoredEvent:
    """The seal row of ``store`` (opened with its key)."""
    return StoredEvent(SEAL_STREAM, 1, "seal", store.rows.seal(_ROW, _TEXT))


def _opens(store: Store, seal: bytes) -> None:
    if not store.encrypted:
        raise CipherError(
            f"{store.name}: this store is encrypted (sealed at rest), and {CIPHER_ENV} "
            "is not set: set it to the key the store was written with; nothing was written"
        )
    try:
        store.rows.unseal(store.name, _ROW, seal)
    except CipherError:
        raise CipherError(
            f"{store.name}: cannot decrypt the store's seal with the key in {CIPHER_ENV}: it "
            "is not the key this store was sealed with; set that key; nothing was written"
        ) from None
