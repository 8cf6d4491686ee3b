"""How a store's rows are written: in clear, or sealed with AES-GCM (encryption at rest).

With ``AGENTLOG_CIPHER_KEY`` set, every event payload, snapshot and blob chunk is sealed
with eventsourcing's :class:`~eventsourcing.cipher.AESCipher` key and AES-GCM, bound to
its row (table, stream, position, topic) so a row cannot be moved to another place.
Topics, positions, stream ids and the run index stay readable for the indexes. Blob
addresses become a keyed hash, so equal content is not recognisable across stores.
"""

from __future__ import annotations

import binascii
import hashlib
import hmac
import uuid
from base64 import b64decode
from typing import TYPE_CHECKING, NamedTuple

from ..errors import CipherError, StoreUnavailable

if TYPE_CHECKING:
    from eventsourcing.cipher import AESCipher

CIPHER_ENV = "AGENTLOG_CIPHER_KEY"
# 0xC1 is the one byte msgpack never uses, so no payload written in clear starts with it.
SEALED = b"\xc1\x01"
_NONCE, _TAG = 12, 16
_MAKE_KEY = (
    'python -c "from eventsourcing.cipher import AESCipher; print(AESCipher.create_key(32))"'
)


class Row(NamedTuple):
    """Where a payload is stored: its table (events, snapshots, blobs), stream and topic."""

    table: str
    stream: uuid.UUID
    position: int
    topic: str

    def aad(self) -> bytes:
        """The row's identity, authenticated with its payload."""
        return f"{self.table}|{self.stream.hex}|{self.position}|{self.topic}".encode()

    def describe(self) -> str:
        what = {
            "events": "the event",
            "snapshots": "the snapshot",
            "views": "the view row",
            "schedules": "the schedule input",
        }.get(self.table, "blob chunk")
        return f"{what} at position {self.position} of stream {self.stream}"


class ClearRows:
    """Rows stored as they are; blob addresses are the SHA-256 of the content."""

    encrypted = False

    def seal(self, row: Row, data: bytes) -> bytes:
        return data

    def unseal(self, store: str, row: Row, data: bytes) -> bytes:
        """``data`` as stored; an encrypted row (never a blob chunk, whose bytes are
        arbitrary and which is reached only through a checked row) is refused."""
        if row.table != "blobs" and data[:2] == SEALED:
            raise CipherError(
                f"{store}: {row.describe()} is encrypted, and {CIPHER_ENV} is not set: "
                "set it to the key this store was written with"
            )
        return data

    def address(self, data: bytes) -> str:
        return hashlib.sha256(data).hexdigest()


class SealedRows(ClearRows):
    """Rows sealed with AES-GCM under one key; any row that does not open is refused."""

    encrypted = True

    def __init__(self, cipher: AESCipher) -> None:
        self._cipher = cipher
        # A separate key for addresses: the cipher key itself is used for nothing else.
        self._address_key = hmac.digest(cipher.key, b"agentlog blob address", "sha256")

    def seal(self, row: Row, data: bytes) -> bytes:
        nonce = self._cipher.random_bytes(_NONCE)
        aes = self._cipher.construct_cipher(nonce)
        aes.update(row.aad())
        encrypted, tag = aes.encrypt_and_digest(data)
        return SEALED + nonce + tag + encrypted

    def unseal(self, store: str, row: Row, data: bytes) -> bytes:
        if data[:2] != SEALED:
            raise CipherError(
                f"{store}: {row.describe()} is not encrypted, but {CIPHER_ENV} is set: the "
                "store was written without encryption (open it with ?cipher=none)"
            )
        head = len(SEALED)
        nonce, tag = data[head : head + _NONCE], data[head + _NONCE : head + _NONCE + _TAG]
        aes = self._cipher.construct_cipher(nonce)
        aes.update(row.aad())
        try:
            return bytes(aes.decrypt_and_verify(data[head + _NONCE + _TAG :], tag))
        except ValueError:
            raise CipherError(
                f"{store}: cannot decrypt {row.describe()} with the key in {CIPHER_ENV} "
                "(it was written with another key, or altered)"
            ) from None

    def address(self, data: bytes) -> str:
        return hmac.new(self._address_key, data, "sha256").hexdigest()


def sealed_rows(name: str, key: str) -> SealedRows:
    """Rows sealed with the base64 AES ``key`` (16, 24 or 32 bytes, as
    ``AESCipher.create_key`` makes); :class:`StoreUnavailable` naming the variable, never
    the key, when it is not one or the ``crypto`` extra is missing."""
    try:
        raw = b64decode(key.strip(), validate=True)
    except (binascii.Error, ValueError):
        raw = b""
    if len(raw) not in (16, 24, 32):
        raise StoreUnavailable(
            f"{name}: {CIPHER_ENV} is not a base64 AES key of 16, 24 or 32 bytes "
            f"(make one with: {_MAKE_KEY})"
        )
    try:
        from eventsourcing.cipher import AESCipher
        from eventsourcing.utils import Environment
    except ImportError:
        raise StoreUnavailable(
            f"{name}: encryption at rest ({CIPHER_ENV}) needs the crypto extra: "
            "pip install 'agentlog[crypto]'"
        ) from None
    return SealedRows(AESCipher(Environment(env={AESCipher.CIPHER_KEY: key.strip()})))
