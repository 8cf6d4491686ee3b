"""msgspec encoding of events; the only serialisation agentlog uses.

The stored topic is ``<tag>:<schema version>``. Current-version rows decode with one
typed decoder for the whole union; older rows go through their upcasters first.
Snapshots reach the store already encoded (:mod:`engine.log.snapshots`): it keeps bytes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import msgspec

from ..errors import CorruptData
from ..events import UPCASTERS, AnyEvent, Event, event_type

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Any] = msgspec.msgpack.Decoder(AnyEvent)


# Events encoded ahead of their append (an outcome's size is checked when it is made,
# its commit may come a call later): id -> (the event, held so the id stays its, payload).
_KEPT_AT_MOST, _KEPT_BYTES = 64, 64 * 1024  # larger payloads are encoded again instead
_kept: dict[int, tuple[Event, bytes]] = {}
# Deferred outcomes' payloads, whatever their size, until appended or let go: the agent
# holds the result's objects meanwhile, and what it does to them is not what the tool gave.
_held: dict[int, tuple[Event, bytes]] = {}


def encode_event(event: Event) -> tuple[str, bytes]:
    """Return ``(topic, payload)`` for ``event`` (encoded once if it was :func:`kept`)."""
    hit = _kept.pop(id(event), None) or _held.pop(id(event), None)
    if hit is not None and hit[0] is event:
        return _topic(type(event)), hit[1]
    return _topic(type(event)), _encoder.encode(event)


def kept(event: Event, held: bool = False) -> int:
    """Encode ``event`` now and keep its payload for its append (``held``: until it or
    :func:`let_go`, however large; else a small one, while few wait); its size in bytes."""
    payload = _encoder.encode(event)
    if held:
        _held[id(event)] = (event, payload)
        return len(payload)
    if len(_kept) >= _KEPT_AT_MOST:  # appends that never came (a run stopped): let go
        _kept.clear()
    if len(payload) <= _KEPT_BYTES:
        _kept[id(event)] = (event, payload)
    return len(payload)


def let_go(events: list[Event]) -> None:
    """Forget the held payloads of ``events`` that were not appended (a run stopped)."""
    for e in events:
        _held.pop(id(e), None)


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
