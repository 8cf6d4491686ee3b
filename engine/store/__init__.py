"""Stores: one URL opens one append-only log (memory, SQLite or PostgreSQL)."""

from .base import Append, BlobRef, Recorded, Snapshot, Store, stream_id
from .ports import Fence, LeaseStore, RunIndex, RunRecorder, RunRow
from .url import cipher_configured, default_url, mask, open_store

__all__ = [
    "Append",
    "BlobRef",
    "Fence",
    "LeaseStore",
    "Recorded",
    "RunIndex",
    "RunRecorder",
    "RunRow",
    "Snapshot",
    "Store",
    "cipher_configured",
    "default_url",
    "mask",
    "open_store",
    "stream_id",
]
