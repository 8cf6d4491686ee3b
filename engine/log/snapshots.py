"""Snapshots of a run's state: a ``RunState`` encoded to bytes here, above the store,
whose ports keep them as bytes with a topic (:class:`engine.store.Snapshot`).

The stored topic is ``run_state:<version>``. Version 2 dropped the checkpoint list and
the input from ``RunState`` (msgspec ignores the dropped fields); version 3 holds what a
run waits on as a typed ``waits_on`` instead of strings, which ``upcast_snapshot`` reads
for versions 1 and 2. A snapshot of another ``run_state`` version, or one that does not
decode, is skipped with a warning and the state rebuilt from events; one of another
topic (a LangGraph thread's, on the same stream) is not this reader's, and skipped.
"""

from __future__ import annotations

import uuid
from typing import Any

import msgspec

from .. import observe
from ..errors import CorruptData
from ..store import Snapshot, Store
from .state import RunState, upcast_snapshot

TOPIC_PREFIX = "run_state:"  # a snapshot of another topic prefix is no run state's
SNAPSHOT_TOPIC = "run_state:3"
LEGACY_SNAPSHOT_TOPICS = frozenset({"run_state:1", "run_state:2"})
SNAPSHOT_TOPICS = frozenset({SNAPSHOT_TOPIC, *LEGACY_SNAPSHOT_TOPICS})

_encoder = msgspec.msgpack.Encoder()
_decoder = msgspec.msgpack.Decoder(RunState)
_legacy_decoder = msgspec.msgpack.Decoder(dict[str, Any])


def encode_snapshot(state: RunState) -> Snapshot:
    """The stored form of a snapshot of ``state``."""
    return Snapshot(state.position, SNAPSHOT_TOPIC, _encoder.encode(state))


def decode_snapshot(snapshot: Snapshot) -> RunState:
    """The state ``snapshot`` holds; :class:`CorruptData` if it has an unknown topic,
    does not decode, or holds the state of another position."""
    if snapshot.topic not in SNAPSHOT_TOPICS:
        raise CorruptData(f"unknown snapshot topic {snapshot.topic!r}")
    try:
        if snapshot.topic == SNAPSHOT_TOPIC:
            state = _decoder.decode(snapshot.payload)
        else:
            legacy = upcast_snapshot(_legacy_decoder.decode(snapshot.payload))
            state = msgspec.convert(legacy, RunState)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptData(str(e)) from e  # msgspec's message names the field at fault
    if state.position != snapshot.position:
        raise CorruptData("snapshot position does not match its row")
    return state


def save_snapshot(store: Store, stream: uuid.UUID, state: RunState) -> None:
    """Store ``state`` as the snapshot at ``state.position``; saving it twice is harmless."""
    store.save_snapshot(stream, encode_snapshot(state))


def snapshot_at_or_before(store: Store, stream: uuid.UUID, position: int | None) -> RunState | None:
    """The newest snapshot that decodes, at or before ``position``; corrupt ones are skipped
    (a key problem, a :class:`~engine.errors.CipherError`, is not)."""
    for snapshot in store.snapshots(stream, position):
        if not snapshot.topic.startswith(TOPIC_PREFIX):
            continue  # another reader's snapshot of the stream (a LangGraph thread's)
        try:
            return decode_snapshot(snapshot)
        except CorruptData as e:
            observe.get().warning(
                "snapshot_skipped",
                stream=str(stream),
                position=snapshot.position,
                error=str(e).strip().splitlines()[0] if str(e).strip() else "CorruptData",
            )
    return None
