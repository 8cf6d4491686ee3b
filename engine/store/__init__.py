"""Stores: one URL opens one append-only log (memory, SQLite or PostgreSQL)."""

from .base import Append, BlobRef, Recorded, RunRow, Store, stream_id
from .url import cipher_configured, default_url, mask, open_store

__all__ = [
    "Append",
    "BlobRef",
    "Recorded",
    "RunRow",
    "Store",
    "cipher_configured",
    "default_url",
    "mask",
    "open_store",
    "stream_id",
]
