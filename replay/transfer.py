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
from engine.log.exporting import HASH_KEY, KEY_ENV, SIG_KEY, chain, export_key, runs_lines, sign
from engine.log.history import RunWriter, run_stream, snapshots_along
from engine.log.snapshots import save_snapshot
from engine.log.state import RunState
from engine.store import Append
from engine.store.codec import encode_event

from .export_runs import FileRuns
from .lines import decode_line, first_line, line_event

if TYPE_CHECKING:
    from engine import Engine
    from engine.runtime.run.catalog import Catalog

_HASH_KEY, _SIG_KEY, _chain, _sign = HASH_KEY, SIG_KEY, chain, sign


def export_lines(
    engine: Catalog, run_id: str, *, sign: bool = False, tree: bool = False
) -> Iterator[bytes]:
    """The run's events as hash-chained JSON lines (each ends with a newline); with
    ``sign``, each also carries the HMAC chain under ``$AGENTLOG_EXPORT_KEY``; with
    ``tree``, the run's descendants follow it, parents first, on one chain (child runs and
    theirs, not forks: a fork is a run of its own, exported by itself)."""
    rid = engine.resolve(run_id)
    runs = [node.run_id for node in engine.tree(rid).walk()] if tree else [rid]
    return runs_lines(engine.store, runs, signed=sign, tree=rid if tree else None)


def left_out(engine: Catalog, run_id: str) -> list[str]:
    """The descendants of ``run_id`` (child runs, their children, ...; not forks), which
    an export of the run alone does not hold, parents before their children."""
    return [node.run_id for node in engine.tree(run_id).walk()[1:]]


# --- import ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Parsed:
    """A checked export file: its run (a tree's root), each run's events in file order
    (one run, or a tree's), its last hash and whether a signature was verified on it."""

    run_id: str
    runs: dict[str, list[Event]]
    chain: str
    signed: bool
    tree: bool = False

    @property
    def events(self) -> list[Event]:
        """The events of the file's run (a tree's root)."""
        return self.runs[self.run_id]


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
    found: FileRuns | None = None
    for n, raw in enumerate(lines, start=1):
        where = f"{source} line {n}"
        body = chain.check(raw.removesuffix(b"\r"), where)
        line = decode_line(body, where)
        if found is None:
            first_line(line, where)
            found = FileRuns.first(line, where)
        found.add(n, line, line_event(line, where), where)
    assert found is not None
    if len(lines) != found.total:
        raise CorruptData(
            f"{source} ends after line {len(lines)} of {found.total}: truncated; nothing imported"
        )
    found.check(source)  # a well-chained file can still hold a log no run could have written
    signed = bool(chain.has_sig) and key is not None
    return Parsed(found.run_id, found.runs, chain.previous, signed, found.tree)


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
    """Write the exported run (or run tree) and its ``run_imported`` record in one
    transaction, into the runs' own streams and index rows only; ``(run_id, written)``.

    Importing an identical run again writes nothing; a run already present with a
    different history is refused with ``UsageError`` (a tree: all of it). The imported
    run is not run by anything until adopted (``engine.adopt``).
    """
    imported = import_file(engine, data, source, require_signature=require_signature)
    return imported.parsed.run_id, bool(imported.written)


@dataclass(frozen=True)
class Imported:
    """What an import read (``parsed``) and the runs it wrote (none: all were present)."""

    parsed: Parsed
    written: list[str]


def import_file(
    engine: Engine, data: bytes, source: str = "the file", *, require_signature: bool = False
) -> Imported:
    """:func:`import_run`, saying which of the file's runs it wrote: every run the file
    holds is checked against the store before anything is written."""
    from engine.runtime.run.adoption import who

    parsed = parse(data, source, require_signature=require_signature)
    new = [(r, events) for r, events in parsed.runs.items() if not _present(engine, r, events)]
    items: list[Append] = []
    rows = []
    shortcuts = []
    for run_id, events in new:
        mark = ev.RunImported(
            at=ev.now(),
            source=source[-200:],
            events=len(events),
            chain=parsed.chain,
            signed=parsed.signed,
            by=who(),
        )
        # The agent's own snapshot_every is code (``@engine.agent``), recorded nowhere in
        # the log, and an imported run's code may not even import here: the default
        # cadence, the one an agent that sets none uses. A snapshot is only a shortcut.
        state, snapshots = snapshots_along(RunState(run_id=run_id), [*events, mark])
        stream = run_stream(run_id)
        items += [Append(stream, i, e) for i, e in enumerate([*events, mark], start=1)]
        rows.append(RunWriter.index_row(state))
        shortcuts += [(stream, snapshot) for snapshot in snapshots]
    if items:
        engine.store.append(items, runs=rows)
    for stream, snapshot in shortcuts:  # as the run's writer would have taken them
        save_snapshot(engine.store, stream, snapshot)
    return Imported(parsed, [run_id for run_id, _ in new])


def _present(engine: Engine, run_id: str, events: list[Event]) -> bool:
    """Whether the store holds the run with this history already (False: not at all);
    ``UsageError`` when it holds it with another history."""
    present = engine.store.read(run_stream(run_id))
    existing = [_same_form(r.event) for r in present]
    if not existing:
        return False
    marked = isinstance(present[-1].event, ev.RunImported)
    if _already(existing, [_same_form(e) for e in events], marked):
        return True
    raise UsageError(
        f"run {run_id} already exists with a different history "
        f"(they differ at position {_differ(existing, events)}); nothing imported"
    )


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
