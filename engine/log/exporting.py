"""A run as an export file: hash-chained JSON Lines, one event a line (the format
``agentlog export`` writes and ``agentlog import`` reads back: :mod:`replay.transfer`).

The encoder lives here, below the runtime, so the engine's own retention can archive a
run before pruning it without reaching up into ``replay``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
from collections.abc import Iterator
from typing import Any

import msgspec

from ..errors import UsageError
from ..events import AnyEvent, Event
from ..store import Store
from ..store.codec import encode_event
from .history import check_tail, iter_run, run_stream

FORMAT = 1
KEY_ENV = "AGENTLOG_EXPORT_KEY"
HASH_KEY = b',"hash":"'
SIG_KEY = b',"sig":"'
_enc = msgspec.json.Encoder()
event_json: msgspec.json.Decoder[Any] = msgspec.json.Decoder(AnyEvent)


def export_key() -> bytes | None:
    """The signing key from ``$AGENTLOG_EXPORT_KEY``, or None when it is unset or empty."""
    key = os.environ.get(KEY_ENV, "")
    return key.encode() if key else None


def chain(previous: str, body: bytes) -> str:
    """The next link of the hash chain: SHA-256 of the previous hash and this body."""
    return hashlib.sha256(previous.encode() + body).hexdigest()


def sign(key: bytes, previous: str, body: bytes) -> str:
    """The next link of the HMAC chain under ``key``."""
    return hmac.new(key, previous.encode() + body, hashlib.sha256).hexdigest()


def run_lines(store: Store, run_id: str, *, signed: bool = False) -> Iterator[bytes]:
    """The events of ``run_id`` (an exact id) as hash-chained JSON lines, each ending
    with a newline; with ``signed``, each also carries the HMAC chain under
    ``$AGENTLOG_EXPORT_KEY``. A damaged log is not exported (CorruptData)."""
    return runs_lines(store, [run_id], signed=signed)


def runs_lines(
    store: Store, runs: list[str], *, signed: bool = False, tree: str | None = None
) -> Iterator[bytes]:
    """The events of each of ``runs`` in turn on one chain, ``index`` and ``total``
    counted over them all; ``tree`` (the root's id) marks each line of a tree export."""
    key = export_key()
    if signed and key is None:
        raise UsageError(f"--sign needs the signing key in ${KEY_ENV}")
    lasts = [_last(store, r) for r in runs]
    total, index = sum(lasts), 0
    previous = signature = ""
    for run_id, last in zip(runs, lasts, strict=True):
        for r in iter_run(store, run_id, upto=last):
            index += 1
            body = line_body(run_id, r.position, total, r.event, index=index, tree=tree)
            previous = chain(previous, body)
            sig = b""
            if signed and key is not None:
                signature = sign(key, signature, body)
                sig = SIG_KEY + signature.encode() + b'"'
            yield body[:-1] + sig + HASH_KEY + previous.encode() + b'"}\n'


def _last(store: Store, run_id: str) -> int:
    """The run's last position, its stream checked to end there."""
    last = store.last_position(run_stream(run_id))
    if last:  # (an empty stream is named as such by iter_run)
        check_tail(store, run_id, last)  # a stream that lost its last events is damaged
    return last


def line_body(
    run_id: str,
    position: int,
    total: int,
    event: Event,
    *,
    index: int | None = None,
    tree: str | None = None,
) -> bytes:
    """One line's body: the line without its ``sig`` and ``hash``."""
    tag: str = event.__struct_config__.tag  # type: ignore[assignment]
    as_json = _enc.encode(event)
    doc: dict[str, Any] = {
        "v": FORMAT,
        "index": position if index is None else index,
        "total": total,
        "run_id": run_id,
        "position": position,
        "type": tag,
        "schema": type(event).SCHEMA,
        "event": msgspec.Raw(as_json),
    }
    if not _exact(as_json, event):
        doc["msgpack"] = base64.b64encode(encode_event(event)[1]).decode()
    if tree is not None:
        doc["tree"] = tree
    return _enc.encode(doc)


def _exact(as_json: bytes, event: Event) -> bool:
    """Whether the JSON form decodes back to an equal event."""
    try:
        return bool(event_json.decode(as_json) == event)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False
