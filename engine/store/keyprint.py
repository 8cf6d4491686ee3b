"""The fingerprint of the replay key a store's runs use, recorded in the store itself.

One row (in the blobs table, at a fixed stream no content hashes to, as the seal row)
holds :func:`engine.secrets.key_check` of the key: a keyed hash of a constant, which
tells whether a key is the store's and gives nothing of the key away. The key itself
never reaches the store. The row is written once, insert-if-absent: of two processes
recording at once, the first insert wins and both read the winner's fingerprint. It
stays in clear in an encrypted store (it is no secret, and reading it needs no key).
"""

from __future__ import annotations

import contextlib
import re

from eventsourcing.persistence import StoredEvent

from ..errors import ConcurrencyError, CorruptData
from .base import Store, stream_id

KEY_STREAM = stream_id("agentlog:replay-key")
_TOPIC = "replay-key"
_CHECK = re.compile(r"[0-9a-f]{16}")


def recorded_key(store: Store) -> str | None:
    """The fingerprint ``store`` records for its replay key (None: none recorded yet).
    A row that is not a fingerprint is refused (``CorruptData``), never trusted."""
    with store._translated():
        rows = store._blobs.select_events(KEY_STREAM, limit=1)
    if not rows:
        return None
    try:
        check = rows[0].state.decode("ascii")
    except UnicodeDecodeError:
        check = ""
    if rows[0].topic != _TOPIC or not _CHECK.fullmatch(check):
        raise CorruptData(
            f"{store.name}: the store's replay key record is damaged (not a key "
            "fingerprint); nothing was written"
        )
    return check


def record_key(store: Store, check: str) -> str:
    """Record ``check`` as ``store``'s replay key fingerprint unless one is recorded
    already (a racing process's); the fingerprint the store holds afterwards."""
    if not _CHECK.fullmatch(check):
        raise ValueError(f"not a key fingerprint: {check!r}")
    store._writable()
    row = StoredEvent(KEY_STREAM, 1, _TOPIC, check.encode("ascii"))
    with contextlib.suppress(ConcurrencyError), store._translated():  # a racing recorder
        store._blobs.insert_events([row])
    recorded = recorded_key(store)
    if recorded is None:  # pragma: no cover - an insert that neither landed nor conflicted
        raise CorruptData(f"{store.name}: the replay key record was not written")
    return recorded
