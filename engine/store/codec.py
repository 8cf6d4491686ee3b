"""msgspec encoding of events and snapshots; the only serialisation agentlog uses.

The stored topic is ``<tag>:<schema version>``. Current-version rows decode with one
typed decoder for the whole union; older rows go through their upcasters first. A
snapshot is a ``RunState`` encoded to bytes here, so the store's ports deal in bytes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

from ..errors import CorruptData
from ..events import UPCASTERS, AnyEvent, Event, event_type
from ..state import RunState, upcast_snapshot

# Version 2 dropped the checkpoint list and the input from RunState (msgspec ignores the
# dropped fields); version 3 holds what a run waits on as a typed ``waits_on`` instead of
# strings, which ``upcast_snapshot`` reads for versions 1 and 2. Any other topic is
# skipped and the state rebuilt from events.
SNAPSHOT_TOPIC = "run_state:3"
LEGACY_SNAPSHOT_TOPICS = frozenset({"run_state:1", "run_state:2"})
SNAPSHOT_TOPICS = frozenset({SNAPSHOT_TOPIC, *LEGACY_SNAPSHOT_TOPICS})

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(AnyEvent)


def encode_event(event: Event) -> tuple[str, bytes]:
    """Return ``(topic, payload)`` for ``event``."""
    return _topic(type(event)), _encoder.encode(event)


@lru_cache(maxsize=256)
def _topic(cls: type[Event]) -> str:
    return topic(str(cls.__struct_config__.tag), cls.SCHEMA)


@lru_cache(maxsize=1024)
def _parse_topic(topic: str) -> tuple[str, int, bool]:
    """``(tag, version, current)`` of a stored topic."""
    tag, _, version = topic.partition(":")
    try:
        cls = event_type(tag)
        v = int(version)
    except (KeyError, ValueError):
        raise CorruptData(f"unknown event topic {topic!r}") from None
    # A version the upcasters cannot walk from (below 1) or to (newer than this code):
    # refused at once, never looped over or decoded as if it were current.
    if v < 1:
        raise CorruptData(f"event topic {topic!r} has an impossible schema version")
    if v > cls.SCHEMA:
        raise CorruptData(
            f"event topic {topic!r} was written by a newer agentlog (this one knows "
            f"{tag!r} up to schema {cls.SCHEMA})"
        )
    return tag, v, v == cls.SCHEMA


def decode_event(topic: str, payload: bytes) -> Event:
    """Decode a stored event, upcasting rows written by older schema versions."""
    tag, version, current = _parse_topic(topic)
    try:
        if current:
            event: Event = _decoder.decode(payload)
            return event
        data = upcast(tag, version, msgspec.msgpack.decode(payload))
        data["type"] = tag
        lifted: Event = msgspec.convert(data, AnyEvent)
        return lifted
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptData(f"cannot decode a stored {tag!r} event: {e}") from e


def encode_snapshot(state: RunState) -> bytes:
    """The stored payload of a snapshot of ``state`` (topic :data:`SNAPSHOT_TOPIC`)."""
    return _encoder.encode(state)


def decode_snapshot(topic: str, payload: bytes, position: int) -> RunState:
    """The state a snapshot row at ``position`` holds; :class:`CorruptData` if the row
    has an unknown topic, does not decode, or holds the state of another position."""
    if topic not in SNAPSHOT_TOPICS:
        raise CorruptData(f"unknown snapshot topic {topic!r}")
    try:
        if topic == SNAPSHOT_TOPIC:
            state = _snapshot_decoder.decode(payload)
        else:
            state = msgspec.convert(upcast_snapshot(_legacy_decoder.decode(payload)), RunState)
    except (msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptData(str(e)) from e  # msgspec's message names the field at fault
    if state.position != position:
        raise CorruptData("snapshot position does not match its row")
    return state


_snapshot_decoder = msgspec.msgpack.Decoder(RunState)
_legacy_decoder = msgspec.msgpack.Decoder(dict[str, Any])


def topic(tag: str, version: int) -> str:
    """The stored topic of a ``tag`` event written at schema ``version``."""
    return f"{tag}:{version}"


def upcast(tag: str, version: int, data: dict[str, Any]) -> dict[str, Any]:
    """``data``, a ``tag`` event as written at schema ``version`` (a dict), lifted to the
    current schema by the upcasters registered beside the event (a version without one
    keeps its shape). For readers of other encodings, such as an export file."""
    for v in range(version, event_type(tag).SCHEMA):
        up = UPCASTERS.get((tag, v))
        if up is not None:
            data = up(data)
    return data
