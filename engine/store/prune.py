"""Retention at the store: how many bytes each stream holds, which streams point at
each blob, and one run's rows deleted in one transaction (the backends:
:mod:`engine.store.prune_rows`), every foreign error translated."""

from __future__ import annotations

import uuid
from collections import defaultdict

import msgspec

from ..errors import CorruptData
from .base import BLOB_SUFFIX, BlobRef, Store, stream_id
from .cipher import SEALED, Row
from .ports import TABLES
from .prune_rows import RunRows, prune_rows

__all__ = ["Pruner", "RunRows"]

_KIND = dict(zip(TABLES, ("events", "snapshots", "blobs"), strict=True))


class Pruner:
    """``store``'s rows as retention reads and deletes them."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._rows = prune_rows(store)

    def sizes(self) -> dict[uuid.UUID, int]:
        """Bytes of events and snapshots per stream (blobs apart: :meth:`blob_sizes`)."""
        found: dict[uuid.UUID, int] = defaultdict(int)
        with self.store._translated():
            for table in TABLES[:2]:
                for sid, n in self._rows.sizes(table).items():
                    found[sid] += n
        return dict(found)

    def blob_sizes(self) -> dict[uuid.UUID, int]:
        """Bytes per blob stream."""
        with self.store._translated():
            return self._rows.sizes(TABLES[2])

    def pointers(self) -> dict[uuid.UUID, set[uuid.UUID]]:
        """Blob stream -> the event and snapshot streams whose rows point at it."""
        found: dict[uuid.UUID, set[uuid.UUID]] = defaultdict(set)
        with self.store._translated():
            rows = self._rows.pointers()
        for table, stream, position, topic, payload in rows:
            if not topic.endswith(BLOB_SUFFIX):
                continue
            data = payload
            if self.store.encrypted or payload[:2] == SEALED:
                data = self.store._unseal(Row(_KIND[table], stream, position, topic), payload)
            try:
                ref = msgspec.msgpack.decode(data, type=BlobRef)
            except (msgspec.DecodeError, msgspec.ValidationError) as e:
                raise CorruptData(
                    f"{self.store.name}: {_KIND[table]} row {position} of stream {stream} "
                    f"should name a blob but does not read ({e}); nothing was pruned"
                ) from None
            found[stream_id("blob:" + ref.sha256)].add(stream)
        return dict(found)

    def delete(self, rows: RunRows, now: float) -> bool:
        """Delete one run's rows in one transaction; False (nothing written) if the run
        moved since it was planned or a live owner holds it."""
        self.store._writable()
        with self.store._translated():
            return self._rows.delete(rows, now)
