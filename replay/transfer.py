"""Export a run as JSON Lines and import it again, losslessly and all-or-nothing.

Each line is one event: ``{"v", "index", "total", "run_id", "position", "type",
"schema", "event", ["msgpack"], "hash"}``. ``event`` is the event as JSON; when JSON
cannot carry it exactly (bytes, non-string keys, NaN) ``msgpack`` holds the stored
encoding in base64 and is what import decodes. ``hash`` is the SHA-256 of the previous
line's hash followed by this line's bytes up to the hash (the line with ``hash``
removed), so an edited, reordered or truncated file (even one cut at a line boundary)
fails the check at a named line and nothing is written.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from engine.errors import CorruptData, UsageError
from engine.events import UPCASTERS, AnyEvent, Event, event_type
from engine.history import DEFAULT_SNAPSHOT_EVERY, RunCheck, RunWriter, iter_run, run_stream
from engine.state import RunState, evolve
from engine.store import Append
from engine.store.codec import decode_event, encode_event

if TYPE_CHECKING:
    from engine import Engine

FORMAT = 1
_HASH_KEY = b',"hash":"'
_enc = msgspec.json.Encoder()
_event_json: msgspec.json.Decoder[Any] = msgspec.json.Decoder(AnyEvent)


class Line(msgspec.Struct):
    """One exported line as import reads it (``hash`` is checked on the raw bytes)."""

    v: int
    index: int
    total: int
    run_id: str
    position: int
    type: str
    schema: int
    event: msgspec.Raw
    msgpack: str | None = None


_line = msgspec.json.Decoder(Line)


def _chain(previous: str, body: bytes) -> str:
    return hashlib.sha256(previous.encode() + body).hexdigest()


def export_lines(engine: Engine, run_id: str) -> Iterator[bytes]:
    """The run's events as hash-chained JSON lines (each ends with a newline)."""
    rid = engine.resolve(run_id)
    total = engine.store.last_position(run_stream(rid))
    previous = ""
    for r in iter_run(engine.store, rid, upto=total):  # a damaged log is not exported
        body = _body(rid, r.position, total, r.event)
        previous = _chain(previous, body)
        yield body[:-1] + _HASH_KEY + previous.encode() + b'"}\n'


def _body(run_id: str, position: int, total: int, event: Event) -> bytes:
    tag: str = event.__struct_config__.tag  # type: ignore[assignment]
    as_json = _enc.encode(event)
    doc: dict[str, Any] = {
        "v": FORMAT,
        "index": position,
        "total": total,
        "run_id": run_id,
        "position": position,
        "type": tag,
        "schema": type(event).SCHEMA,
        "event": msgspec.Raw(as_json),
    }
    if not _exact(as_json, event):
        doc["msgpack"] = base64.b64encode(encode_event(event)[1]).decode()
    return _enc.encode(doc)


def _exact(as_json: bytes, event: Event) -> bool:
    """Whether the JSON form decodes back to an equal event."""
    try:
        return bool(_event_json.decode(as_json) == event)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


# --- import ----------------------------------------------------------------------------


def read_lines(data: bytes, source: str = "the file") -> tuple[str, list[Event]]:
    """Check every line and its hash chain; the run id and its events, or CorruptData
    naming the first line that fails."""
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise CorruptData(f"{source} is empty: no events to import")
    previous = ""
    run_id = ""
    total = 0
    events: list[Event] = []
    for n, raw in enumerate(lines, start=1):
        where = f"{source} line {n}"
        raw = raw.removesuffix(b"\r")
        body = _unhashed(raw, where)
        digest = raw[len(body) - 1 + len(_HASH_KEY) : -2].decode()
        previous = _chain(previous, body)
        if digest != previous:
            raise CorruptData(f"{where}: hash does not match (the line or one before it changed)")
        try:
            line = _line.decode(body)
        except (msgspec.DecodeError, msgspec.ValidationError) as e:
            raise CorruptData(f"{where}: not an agentlog export line ({e})") from None
        if line.v != FORMAT:
            raise CorruptData(f"{where}: export format {line.v} is not supported")
        if n == 1:
            run_id, total = line.run_id, line.total
        if line.index != n or line.position != n:
            raise CorruptData(f"{where}: holds event {line.index}, expected {n} (reordered)")
        if line.total != total or line.run_id != run_id:
            raise CorruptData(f"{where}: belongs to another export (run or total differs)")
        events.append(_event(line, where))
    if len(lines) != total:
        raise CorruptData(
            f"{source} ends after line {len(lines)} of {total}: truncated; nothing imported"
        )
    try:  # a well-chained file can still hold a log no run could have written
        RunCheck(run_id)([Append(run_stream(run_id), i, e) for i, e in enumerate(events, 1)])
    except CorruptData as bad:
        raise CorruptData(f"{source}: {bad}; nothing imported") from None
    return run_id, events


def _unhashed(raw: bytes, where: str) -> bytes:
    """The line without its trailing ``,"hash":"<hex>"`` (with the closing brace kept)."""
    cut = len(raw) - 2 - 64 - len(_HASH_KEY)
    if cut < 1 or not raw.endswith(b'"}') or raw[cut : cut + len(_HASH_KEY)] != _HASH_KEY:
        raise CorruptData(f"{where}: no hash at the end of the line (not an agentlog export)")
    return raw[:cut] + b"}"


def _event(line: Line, where: str) -> Event:
    try:
        if line.msgpack is not None:
            return decode_event(f"{line.type}:{line.schema}", base64.b64decode(line.msgpack))
        cls = event_type(line.type)
        if line.schema == cls.SCHEMA:
            event: Event = _event_json.decode(line.event)
        else:
            data = msgspec.json.decode(line.event)
            for version in range(line.schema, cls.SCHEMA):
                up = UPCASTERS.get((line.type, version))
                data = up(data) if up is not None else data
            data["type"] = line.type
            event = msgspec.convert(data, AnyEvent)
    except (KeyError, ValueError, msgspec.DecodeError, msgspec.ValidationError) as e:
        raise CorruptData(f"{where}: cannot decode its {line.type} event ({e})") from None
    except CorruptData as e:
        raise CorruptData(f"{where}: {e}") from None
    if event.__struct_config__.tag != line.type:
        raise CorruptData(f"{where}: event type differs from the line's type")
    return event


def _same_form(event: Event) -> tuple[str, bytes]:
    """An event's stored form: equal forms are the same fact (NaN included)."""
    return encode_event(event)


def import_run(engine: Engine, data: bytes, source: str = "the file") -> tuple[str, bool]:
    """Write the exported run in one transaction; ``(run_id, written)``.

    Importing an identical run again writes nothing; a run already present with a
    different history is refused with ``UsageError``.
    """
    run_id, events = read_lines(data, source)
    stream = run_stream(run_id)
    items = [Append(stream, i, e) for i, e in enumerate(events, start=1)]
    existing = [_same_form(r.event) for r in engine.store.read(stream)]
    if existing:
        imported = [_same_form(e) for e in events]
        if existing == imported:
            return run_id, False
        differ = next(
            (i + 1 for i, (a, b) in enumerate(zip(existing, imported, strict=False)) if a != b),
            min(len(existing), len(imported)) + 1,
        )
        raise UsageError(
            f"run {run_id} already exists with a different history "
            f"(they differ at position {differ}); nothing imported"
        )
    state = RunState(run_id=run_id)
    snapshots = []
    for position, e in enumerate(events, start=1):
        state = evolve(state, e, position)
        if position % DEFAULT_SNAPSHOT_EVERY == 0:
            snapshots.append(state)
    engine.store.append(items, runs=[RunWriter.index_row(state)])
    for snapshot in snapshots:  # as the run's writer would have taken them; harmless twice
        engine.store.save_snapshot(stream, snapshot)
    return run_id, True
