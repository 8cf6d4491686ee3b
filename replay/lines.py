"""One line of an export file as untrusted input: its fields, and its event decoded and
checked (a run event of a known schema, its readable and msgpack forms the same event, its
numbers and ids in range). Every failure is ``CorruptData`` naming the line."""

from __future__ import annotations

import base64
import functools
import math
from typing import Any

import msgspec

from engine import events as ev
from engine.errors import CorruptData, UsageError
from engine.events import AnyEvent, Event, event_type
from engine.log.exporting import FORMAT, event_json
from engine.log.history import check_run_id
from engine.store.codec import decode_event, encode_event, topic, upcast

_enc = msgspec.json.Encoder()
# Events of the shared ledger and of tools' own streams: a run's stream never holds one.
FOREIGN = frozenset(
    t.__struct_config__.tag
    for t in (
        ev.EffectClaimed,
        ev.EffectCommitted,
        ev.EffectReleased,
        ev.KeyExpired,
        ev.CircuitOpened,
        ev.CircuitHalfOpened,
        ev.CircuitClosed,
        ev.MessagePosted,  # a run's inbox stream holds it, never the run's own
    )
)
LIMIT = 2**63  # positions, calls and counts stay below it (a signed 64-bit column)
# Timestamps a datetime can show: 0001-01-01 to 9999-12-31 UTC.
EARLIEST, LATEST = -62135596800.0, 253402300799.0
ONE_BASED = frozenset({"call", "parent_call", "fork_position"})
# The fields that name a run: each must be a run id (the run it names need not be here).
RUN_IDS = (
    "parent_run_id",
    "run_id",
    "child_run_id",
    "previous_run_id",
    "asking_run_id",
    "to_run_id",
    "from_run_id",
)


class Line(msgspec.Struct):
    """One exported line as import reads it (``hash`` and ``sig`` are checked on the raw
    bytes)."""

    v: int
    index: int
    total: int
    run_id: str
    position: int
    type: str
    schema: int
    event: msgspec.Raw
    msgpack: str | None = None
    tree: str | None = None  # a tree export's root run (``export_runs``)


_line = msgspec.json.Decoder(Line)


def decode_line(body: bytes, where: str) -> Line:
    try:
        line = _line.decode(body)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as e:
        raise CorruptData(f"{where}: not an agentlog export line ({e})") from None
    if line.v != FORMAT:
        raise CorruptData(f"{where}: export format {line.v} is not supported")
    return line


def first_line(line: Line, where: str) -> tuple[str, int]:
    """The run id and event count the first line announces, checked."""
    try:
        run_id = check_run_id(line.run_id)
    except UsageError as e:
        raise CorruptData(f"{where}: {e}") from None
    if not 1 <= line.total < LIMIT:
        raise CorruptData(f"{where}: total {line.total} is out of range")
    return run_id, line.total


def line_event(line: Line, where: str) -> Event:
    """The line's event: a run event of a schema this code knows, its JSON and msgpack
    forms the same event, its numbers in range."""
    try:
        cls = event_type(line.type)
    except KeyError:
        raise CorruptData(f"{where}: unknown event type {line.type[:60]!r}") from None
    if line.type in FOREIGN:
        raise CorruptData(f"{where}: a {line.type} event never belongs to a run; refused")
    if not 1 <= line.schema <= cls.SCHEMA:
        raise CorruptData(
            f"{where}: {line.type} schema {line.schema} is not one this version knows "
            f"(1..{cls.SCHEMA})"
        )
    try:
        event: Event
        if line.msgpack is None and line.schema == cls.SCHEMA:
            event = event_json.decode(line.event)  # the common case: one typed decode
        elif line.msgpack is None:
            event = msgspec.convert(_current_form(line), AnyEvent)
        else:
            data = _current_form(line)
            event = decode_event(topic(line.type, line.schema), _unbase64(line.msgpack))
            if msgspec.json.decode(_enc.encode(event)) != data:
                raise CorruptData("its event and its msgpack are not the same event")
    except (
        ValueError,
        TypeError,
        OverflowError,
        RecursionError,
        msgspec.DecodeError,
        msgspec.EncodeError,
        msgspec.ValidationError,
    ) as e:
        raise CorruptData(f"{where}: cannot decode its {line.type} event ({e})") from None
    except CorruptData as e:
        raise CorruptData(f"{where}: {e}") from None
    if event.__struct_config__.tag != line.type:
        raise CorruptData(f"{where}: event type differs from the line's type")
    _check_numbers(event, where)
    try:
        encode_event(event)  # what the store will write: every value must encode
    except (OverflowError, TypeError, msgspec.EncodeError) as e:
        raise CorruptData(f"{where}: its {line.type} event cannot be stored ({e})") from None
    return event


def _current_form(line: Line) -> dict[str, Any]:
    """The line's readable event as a dict of the current schema (upcast if older)."""
    data: dict[str, Any] = msgspec.json.decode(line.event)
    if not isinstance(data, dict):
        raise CorruptData("its event is not a JSON object")
    if data.get("type", line.type) != line.type:
        raise CorruptData("its event's type differs from the line's type")
    data = upcast(line.type, line.schema, data)
    data["type"] = line.type
    return data


def _unbase64(text: str) -> bytes:
    return base64.b64decode(text, validate=True)


def _check_numbers(event: Event, where: str) -> None:
    """The event's own numeric fields (not the values it carries): timestamps finite and
    within datetime's range, floats finite, positions, calls and counts in range; run ids
    well formed."""
    for name in _numeric(type(event)):
        value = getattr(event, name)
        if isinstance(value, float):
            if not math.isfinite(value) or (name == "at" and not EARLIEST <= value <= LATEST):
                raise CorruptData(f"{where}: {name} {value!r} is out of range")
        elif isinstance(value, int) and not (1 if name in ONE_BASED else 0) <= value < LIMIT:
            raise CorruptData(f"{where}: {name} {value} is out of range")
    for name in RUN_IDS:
        value = getattr(event, name, None)
        if isinstance(value, str):
            try:
                check_run_id(value, name.replace("_", " "))
            except UsageError as e:
                raise CorruptData(f"{where}: {e}") from None


@functools.cache
def _numeric(cls: type[Event]) -> tuple[str, ...]:
    """The fields of ``cls`` declared as numbers (``int``/``float``, optional or not)."""
    numbers = {int, float, int | None, float | None}
    return tuple(f.name for f in msgspec.structs.fields(cls) if f.type in numbers)
