"""Export a run as JSON Lines and import it again, losslessly and all-or-nothing.

Each line is one event: ``{"v", "index", "total", "run_id", "position", "type",
"schema", "event", ["msgpack"], ["sig"], "hash"}``. ``event`` is the event as JSON; when
JSON cannot carry it exactly (bytes, non-string keys, NaN) ``msgpack`` holds the stored
encoding in base64, import decodes it and refuses the line unless both say the same.
``hash`` is the SHA-256 of the previous line's hash followed by this line's bytes up to
``sig`` (the line without ``sig`` and ``hash``): an edited, reordered or truncated file
(even one cut at a line boundary) fails at a named line and nothing is written. Anyone
can recompute that chain, so it proves integrity, not origin. ``sig`` (``export --sign``)
is an HMAC-SHA256 chain over the same bytes under ``AGENTLOG_EXPORT_KEY``: it proves that
someone holding the key wrote the file.

A file is untrusted input: import checks the run id, the event types (run events only:
never a ledger or breaker event), the numbers and the timestamps, writes only the run's
own stream and index row, and records ``run_imported`` after the file's events, so
nothing runs the run until a person adopts it.
"""

from __future__ import annotations

import hmac
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO

from engine import events as ev
from engine.errors import CorruptData, UsageError
from engine.events import Event
from engine.log.exporting import (
    HASH_KEY,
    KEY_ENV,
    SIG_KEY,
    chain,
    export_key,
    line_body,
    run_lines,
    sign,
)
from engine.log.history import RunWriter, run_stream, snapshots_along
from engine.log.runcheck import RunCheck
from engine.log.snapshots import save_snapshot
from engine.log.state import RunState
from engine.store import Append
from engine.store.codec import encode_event

from .lines import decode_line, first_line, line_event

if TYPE_CHECKING:
    from engine import Engine
    from engine.runtime.run.catalog import Catalog

_HASH_KEY, _SIG_KEY, _chain, _sign, _body = HASH_KEY, SIG_KEY, chain, sign, line_body


def export_lines(engine: Catalog, run_id: str, *, sign: bool = False) -> Iterator[bytes]:
    """The run's events as hash-chained JSON lines (each ends with a newline); with
    ``sign``, each also carries the HMAC chain under ``$AGENTLOG_EXPORT_KEY``."""
    return run_lines(engine.store, engine.resolve(run_id), signed=sign)


def left_out(engine: Catalog, run_id: str) -> list[str]:
    """The descendants of ``run_id`` (child runs, their children, ...; not forks), which
    an export of the run alone does not hold, parents before their children."""
    return [node.run_id for node in engine.tree(run_id).walk()[1:]]


# --- import ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """A checked export file: its run, its events, its last hash and whether a signature
    was verified on it."""

    run_id: str
    events: list[Event]
    chain: str
    signed: bool


def read_lines(data: bytes, source: str = "the file") -> tuple[str, list[Event]]:
    """Check every line and its hash chain; the run id and its events, or CorruptData
    naming the first line that fails."""
    parsed = parse(data, source)
    return parsed.run_id, parsed.events


def parse(data: bytes, source: str = "the file", *, require_signature: bool = False) -> Parsed:
    """Check the whole file: hash chain, signature (verified when ``$AGENTLOG_EXPORT_KEY``
    is set; required with ``require_signature``), every line's fields, numbers and event.
    Raises CorruptData (UsageError for a missing key) naming the first line that fails."""
    key = export_key()
    if require_signature and key is None:
        raise UsageError(f"--require-signature needs the signing key in ${KEY_ENV}")
    lines = data.split(b"\n")
    if lines and lines[-1] == b"":
        lines.pop()
    if not lines:
        raise CorruptData(f"{source} is empty: no events to import")
    chain = _Chain(key, require_signature)
    run_id, total = "", 0
    events: list[Event] = []
    for n, raw in enumerate(lines, start=1):
        where = f"{source} line {n}"
        body = chain.check(raw.removesuffix(b"\r"), where)
        line = decode_line(body, where)
        if n == 1:
            run_id, total = first_line(line, where)
        if line.index != n or line.position != n:
            raise CorruptData(f"{where}: holds event {line.index}, expected {n} (reordered)")
        if line.total != total or line.run_id != run_id:
            raise CorruptData(f"{where}: belongs to another export (run or total differs)")
        events.append(line_event(line, where))
    if len(lines) != total:
        raise CorruptData(
            f"{source} ends after line {len(lines)} of {total}: truncated; nothing imported"
        )
    try:  # a well-chained file can still hold a log no run could have written
        RunCheck(run_id)([Append(run_stream(run_id), i, e) for i, e in enumerate(events, 1)])
    except CorruptData as bad:
        raise CorruptData(f"{source}: {bad}; nothing imported") from None
    return Parsed(run_id, events, chain.previous, bool(chain.has_sig) and key is not None)


@dataclass
class _Chain:
    """The hash chain (and, with a key, the signature chain) of a file read line by line."""

    key: bytes | None
    require_signature: bool
    previous: str = ""
    signed: str = ""
    has_sig: bool | None = None  # whether the first line was signed: all or none are

    def check(self, raw: bytes, where: str) -> bytes:
        """The line's body, once its hash and signature continue the chains."""
        body, digest, sig = _split(raw, where)
        self.previous = _chain(self.previous, body)
        if digest != self.previous:
            raise CorruptData(f"{where}: hash does not match (the line or one before it changed)")
        if self.has_sig is None:
            self.has_sig = sig is not None
        if (sig is not None) != self.has_sig:
            raise CorruptData(f"{where}: signed and unsigned lines are mixed")
        if sig is not None and self.key is not None:
            self.signed = _sign(self.key, self.signed, body)
            if not hmac.compare_digest(sig, self.signed):
                raise CorruptData(f"{where}: signature does not match {KEY_ENV}")
        if self.require_signature and sig is None:
            raise CorruptData(f"{where}: not signed (--require-signature)")
        return body


def _split(raw: bytes, where: str) -> tuple[bytes, str, str | None]:
    """``(body, hash, sig)`` of a line: the line without its trailing ``,"sig":"<hex>"``
    and ``,"hash":"<hex>"`` (the closing brace kept), and the two digests."""
    cut = len(raw) - 2 - 64 - len(_HASH_KEY)
    if cut < 1 or not raw.endswith(b'"}') or raw[cut : cut + len(_HASH_KEY)] != _HASH_KEY:
        raise CorruptData(f"{where}: no hash at the end of the line (not an agentlog export)")
    digest = raw[cut + len(_HASH_KEY) : -2].decode("ascii", "replace")
    head = raw[:cut]
    at = len(head) - len(_SIG_KEY) - 64 - 1
    if at > 0 and head.endswith(b'"') and head[at : at + len(_SIG_KEY)] == _SIG_KEY:
        return head[:at] + b"}", digest, head[at + len(_SIG_KEY) : -1].decode("ascii", "replace")
    return head + b"}", digest, None


def _same_form(event: Event) -> tuple[str, bytes]:
    """An event's stored form: equal forms are the same fact (NaN included)."""
    return encode_event(event)


MAX_FILE = 1 << 30  # an export larger than this is refused, not read whole
_CHUNK = 1 << 20


def read_export(f: BinaryIO, source: str, max_payload: int) -> bytes:
    """The export file ``f`` read in chunks: UsageError (and nothing more read) once it
    passes :data:`MAX_FILE` or holds a line longer than one event can be (an event's
    payload cap ``max_payload``, base64-encoded, with room for its envelope)."""
    max_line = 2 * max_payload + _CHUNK
    parts: list[bytes] = []
    size = line = 0
    while chunk := f.read(_CHUNK):
        size += len(chunk)
        cut = chunk.rfind(b"\n")
        line = line + len(chunk) if cut < 0 else len(chunk) - cut - 1
        if size > MAX_FILE:
            raise UsageError(f"{source}: larger than {MAX_FILE} bytes; not an export file")
        if line > max_line:
            raise UsageError(
                f"{source}: a line longer than {max_line} bytes (no event is that large); "
                "not an export file"
            )
        parts.append(chunk)
    return b"".join(parts)


def import_run(
    engine: Engine,
    data: bytes,
    source: str = "the file",
    *,
    require_signature: bool = False,
) -> tuple[str, bool]:
    """Write the exported run and its ``run_imported`` record in one transaction, into
    the run's own stream and index row only; ``(run_id, written)``.

    Importing an identical run again writes nothing; a run already present with a
    different history is refused with ``UsageError``. The imported run is not run by
    anything until adopted (``engine.adopt``).
    """
    from engine.runtime.run.adoption import who

    parsed = parse(data, source, require_signature=require_signature)
    run_id, events = parsed.run_id, parsed.events
    stream = run_stream(run_id)
    present = engine.store.read(stream)
    existing = [_same_form(r.event) for r in present]
    if existing:
        marked = isinstance(present[-1].event, ev.RunImported)
        if _already(existing, [_same_form(e) for e in events], marked):
            return run_id, False
        raise UsageError(
            f"run {run_id} already exists with a different history "
            f"(they differ at position {_differ(existing, events)}); nothing imported"
        )
    mark = ev.RunImported(
        at=ev.now(),
        source=source[-200:],
        events=len(events),
        chain=parsed.chain,
        signed=parsed.signed,
        by=who(),
    )
    # The agent's own snapshot_every is code (``@engine.agent``), recorded nowhere in the
    # log, and an imported run's code may not even import here: the default cadence, the
    # one an agent that sets none uses. A snapshot is only a shortcut for rebuilds.
    state, snapshots = snapshots_along(RunState(run_id=run_id), [*events, mark])
    items = [Append(stream, i, e) for i, e in enumerate([*events, mark], start=1)]
    engine.store.append(items, runs=[RunWriter.index_row(state)])
    for snapshot in snapshots:  # as the run's writer would have taken them; harmless twice
        save_snapshot(engine.store, stream, snapshot)
    return run_id, True


def _already(
    existing: list[tuple[str, bytes]], imported: list[tuple[str, bytes]], marked: bool
) -> bool:
    """Whether the present run is this file's run: the same events, as exported here or
    as imported here before (followed by its ``run_imported`` record: ``marked``)."""
    if existing == imported:
        return True
    return marked and len(existing) == len(imported) + 1 and existing[:-1] == imported


def _differ(existing: list[tuple[str, bytes]], events: list[Event]) -> int:
    imported = [_same_form(e) for e in events]
    pairs = zip(existing, imported, strict=False)
    return next(
        (i + 1 for i, (a, b) in enumerate(pairs) if a != b),
        min(len(existing), len(imported)) + 1,
    )
