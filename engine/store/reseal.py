"""Resealing a store whose rows are partly in clear (:mod:`engine.store.mixed`).

:func:`reseal` (``agentlog reseal``, the key set) encrypts the rows in clear in place, a
batch per transaction (idempotent: an encrypted row is left as it is; resumable: a run
stopped half way goes on where it stopped), drops the views (the next reader rebuilds
them from the log), compacts SQLite's file (PostgreSQL keeps old row versions until its
vacuum reuses them), and then seals the store. A key that does not open the rows already
encrypted is refused before anything is written.
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Callable

import msgspec

from ..errors import CipherError, ConcurrencyError, CorruptData
from .base import BLOB_CHUNK, BLOB_SUFFIX, BlobRef, Store, stream_id
from .cipher import CIPHER_ENV, SEALED, Row
from .mixed import BATCH, rows_of
from .rawrows import RawRow, RawRows, raw_rows


def reseal(store: Store, progress: Callable[[int], None] | None = None) -> int:
    """Encrypt every row of ``store`` (opened with the key) written in clear, then seal
    it; the number of rows encrypted. :class:`CipherError` without the key."""
    if not store.encrypted:
        raise CipherError(
            f"{store.name}: {CIPHER_ENV} is not set: reseal needs the key to encrypt the "
            "rows written in clear with; nothing was changed"
        )
    raw = raw_rows(store._events, store._snapshots, store._blobs, store.views.port)
    _check_key(store, raw)
    done = 0
    for table in ("events", "snapshots"):
        batch: list[RawRow] = []
        for r in rows_of(raw, table):
            if r.state[:2] != SEALED:
                batch.append(r)
            if len(batch) >= BATCH:
                done += _reseal_batch(store, raw, table, batch)
                batch = []
                if progress is not None:
                    progress(done)
        done += _reseal_batch(store, raw, table, batch)
    done += store.schedules.reseal()
    _drop_clear_blobs(store, raw)
    raw.drop_views()
    _seal(store)
    raw.compact()
    return done


def _reseal_batch(store: Store, raw: RawRows, table: str, batch: list[RawRow]) -> int:
    """Encrypt ``batch`` (rows of ``table`` in clear) in one transaction: a row whose
    payload is out of line gets its blob stored anew, encrypted, at its keyed address."""
    puts: list[tuple[str, RawRow]] = []
    for r in batch:
        data = r.state
        if r.topic.endswith(BLOB_SUFFIX):
            ref, chunks = _blob_sealed(store, msgspec.msgpack.decode(data, type=BlobRef))
            data = msgspec.msgpack.encode(ref)
            puts += chunks
        row = Row(table, r.stream, r.position, r.topic)
        puts.append(
            (
                table,
                RawRow(r.stream, r.position, r.topic, store.rows.seal(row, data)),
            )
        )
    if puts:
        raw.rewrite(puts, [])
    return len(batch)


def _blob_sealed(store: Store, ref: BlobRef) -> tuple[BlobRef, list[tuple[str, RawRow]]]:
    """A blob written in clear (by its SHA-256), as encrypted chunks at its keyed address."""
    sid = stream_id("blob:" + ref.sha256)
    with store._translated():
        data = b"".join(r.state for r in store._blobs.select_events(sid))
    if len(data) != ref.size or hashlib.sha256(data).hexdigest() != ref.sha256:
        raise CorruptData(f"{store.name}: blob {ref.sha256[:12]} is missing or corrupt")
    new = BlobRef(store.rows.address(data), len(data))
    to = stream_id("blob:" + new.sha256)
    chunks = []
    for i in range(max(1, -(-len(data) // BLOB_CHUNK))):
        part = store.rows.seal(
            Row("blobs", to, i + 1, "blob"), data[i * BLOB_CHUNK : (i + 1) * BLOB_CHUNK]
        )
        chunks.append(("blobs", RawRow(to, i + 1, "blob", part)))
    return new, chunks


def _check_key(store: Store, raw: RawRows) -> None:
    """Refuse, before anything is written, a key that does not open every encrypted row
    the store holds: resealing under it would seal the store to a key its own rows do not
    open (and leave those rows unreadable with either key)."""
    for table in ("events", "snapshots"):  # blob chunks are reached through these
        for r in rows_of(raw, table):
            if r.state[:2] != SEALED:
                continue
            try:
                store.rows.unseal(store.name, Row(table, r.stream, r.position, r.topic), r.state)
            except CipherError:
                raise CipherError(
                    f"{store.name}: its encrypted rows do not open with this "
                    f"{CIPHER_ENV}: set the key they were written with; nothing was changed"
                ) from None


def _drop_clear_blobs(store: Store, raw: RawRows) -> None:
    """Delete the blob chunks that do not open with the key (checked first to be the key
    of the store's encrypted rows): once every event and snapshot row is encrypted,
    nothing refers to them (their content was stored anew). A chunk's bytes are arbitrary,
    so only opening it tells a sealed one from one in clear. The seal and the replay key
    record (kept in clear) are no chunks."""
    from .keyprint import KEY_STREAM
    from .seal import SEAL_STREAM

    gone = []
    for r in rows_of(raw, "blobs"):
        if r.stream in (SEAL_STREAM, KEY_STREAM):
            continue
        try:
            store.rows.unseal(store.name, Row("blobs", r.stream, r.position, r.topic), r.state)
        except CipherError:
            gone.append(("blobs", (r.stream, r.position)))
    for i in range(0, len(gone), BATCH):
        raw.rewrite([], gone[i : i + BATCH])


def _seal(store: Store) -> None:
    from .seal import SEAL_STREAM, seal_row

    with store._translated():
        present = store._blobs.select_events(SEAL_STREAM, limit=1)
    if not present:
        with contextlib.suppress(ConcurrencyError), store._translated():
            store._blobs.insert_events([seal_row(store)])
