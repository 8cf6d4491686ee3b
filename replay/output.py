"""How the CLI writes: JSON documents for machines, styled text lines for people.

Text lines go straight to the stream (ANSI styles only on a terminal) so a 10,000-event
timeline prints in well under a second; rich is kept for the few boxed panels.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from typing import IO, TYPE_CHECKING, Any

import msgspec

from engine import RunResult, RunState, RunSummary
from engine.kinds import LineageKind, RunStatus
from engine.secrets import redact

if TYPE_CHECKING:
    from rich.console import Console

    from projections.views.runs import RunBoardRow
from engine.log.state import CheckpointRef

Piece = str | tuple[str, str]  # plain text, or (text, style)

_SGR = {
    "bold": "1",
    "dim": "2",
    "italic": "3",
    "red": "31",
    "green": "32",
    "yellow": "33",
    "blue": "34",
    "magenta": "35",
    "cyan": "36",
}
_json = msgspec.json.Encoder()
EXIT: dict[str, int] = {
    RunStatus.COMPLETED: 0,
    RunStatus.DRY_RUN: 0,  # a dry-run fork ended (it sent nothing): done, as a completed run
    RunStatus.QUEUED: 3,  # not finished: it waits for a worker
    RunStatus.PAUSED: 3,
    RunStatus.WAITING: 3,  # not finished: it waits (for a timer, a message or a child)
    RunStatus.HELD: 3,  # not finished: it waits for a person's approve
    RunStatus.FAILED: 4,
    RunStatus.ABANDONED: 4,
}


def exit_status(status: str) -> int:
    """The CLI's exit status for a run left in ``status`` (0 done, 3 paused, waiting or held,
    4 failed or abandoned)."""
    return EXIT.get(status, 1)


# A command over many runs exits with the worst of theirs: unexpected > refused > failed >
# paused > done.
_WORST_FIRST = (1, 2, 4, 3, 0)


def worst(codes: Iterable[int]) -> int:
    """The worst of the exit statuses ``codes`` (0 for none)."""
    found = set(codes)
    return next((code for code in _WORST_FIRST if code in found), 0)


# What a terminal would act on rather than show: C0 and C1 controls (ESC, CR, BEL, CSI...),
# DEL, bidirectional overrides, and lone surrogates (bytes that were not UTF-8).
_UNSAFE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
_LINE_BREAKS = re.compile("[^\n\t]+")


def printable(text: str, keep_lines: bool = False) -> str:
    """``text`` safe to show on a terminal: every control character escaped as Python
    writes it (``\\x1b``, ``\\r``, ``\\u202e``); ``keep_lines`` leaves newlines and tabs."""
    if text.isprintable():  # the common case, at C speed
        return text
    if keep_lines:
        return _LINE_BREAKS.sub(lambda m: printable(m.group()), text)
    return _UNSAFE.sub(lambda m: repr(m.group())[1:-1], text)


def _ansi(style: str) -> str:
    codes = [_SGR[w] for w in style.split() if w in _SGR]
    return f"\x1b[{';'.join(codes)}m" if codes else ""


class Out:
    """A text/JSON writer on one stream; styles are emitted only when it is a terminal."""

    def __init__(self, stream: IO[str] | None = None, color: bool | None = None) -> None:
        self.stream = stream if stream is not None else sys.stdout
        if color is None:
            color = _wants_color(self.stream)
        self.color = color
        self.gone = False  # the reader went away (``| head``): nothing more is written
        self._codes: dict[str, str] = {}

    def text(self, *pieces: Piece) -> str:
        """One line of pieces; the text of each is escaped with :func:`printable`, so a
        recorded value can never move the cursor, clear the screen or forge a line."""
        parts: list[str] = []
        for p in pieces:
            if isinstance(p, str):
                parts.append(printable(p))
            elif self.color and p[1]:
                code = self._codes.get(p[1])
                if code is None:
                    code = self._codes[p[1]] = _ansi(p[1])
                parts.append(f"{code}{printable(p[0])}\x1b[0m" if code else printable(p[0]))
            else:
                parts.append(printable(p[0]))
        return "".join(parts)

    def write(self, text: str) -> None:
        """Write ``text`` as it is, unless the reader has gone."""
        if not self.gone:
            try:
                self.stream.write(text)
            except BrokenPipeError:
                self.close_quietly()

    def close_quietly(self) -> None:
        """The reader went away: drop the rest of the output, and let the command finish
        with its own exit status (no traceback, no complaint when the process exits)."""
        self.gone = True
        quiet_stdout()

    def line(self, *pieces: Piece) -> None:
        self.write(self.text(*pieces) + "\n")

    def lines(self, rows: Iterable[list[Piece]]) -> None:
        for row in rows:
            if self.gone:
                break
            self.write(self.text(*row) + "\n")

    def block(self, text: str) -> None:
        """Several lines of text as they are, control characters but newlines escaped."""
        self.write(printable(text, keep_lines=True))

    def json(self, doc: Any) -> None:
        """One JSON document, indented for people who read ``--json`` too."""
        self.write(msgspec.json.format(_json.encode(doc).decode(), indent=2) + "\n")

    def json_stream(self, items: Iterator[Any]) -> None:
        """A JSON array written one item a line, so long lists stream."""
        first = True
        self.write("[")
        for item in items:
            if self.gone:
                return
            self.write(("\n  " if first else ",\n  ") + _json.encode(item).decode())
            first = False
        self.write("]\n" if first else "\n]\n")

    def raw(self, chunks: Iterable[bytes]) -> None:
        """Bytes straight to the stream's buffer (JSON Lines exports), in order."""
        if self.gone:
            return
        try:
            self.stream.flush()
            buffer = getattr(self.stream, "buffer", None) or sys.stdout.buffer
            for chunk in chunks:
                buffer.write(chunk)
            buffer.flush()
        except BrokenPipeError:
            self.close_quietly()


def rich_console(out: Out, plain_width: int) -> Console:
    """A rich console on ``out``'s stream for the few drawn views (tables, trees): styled
    on a terminal, plain and ``plain_width`` columns wide elsewhere."""
    from rich.console import Console

    return Console(
        file=out.stream,
        force_terminal=out.color,
        no_color=not out.color,
        width=None if out.color else plain_width,
        highlight=False,
        emoji=False,
    )


def quiet_stdout() -> None:
    """Point the process's stdout at /dev/null, so the bytes still buffered for a reader
    that went away are dropped rather than raising again at exit."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, ValueError, OSError):  # not a real file (tests capture it)
        return
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, fd)
    os.close(devnull)


def _wants_color(stream: IO[str]) -> bool:
    if os.environ.get("NO_COLOR"):
        return False
    if os.environ.get("FORCE_COLOR"):
        return True
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


# --- values ----------------------------------------------------------------------------


def when(ts: float | None) -> datetime | None:
    """Epoch seconds as an aware UTC datetime (msgspec writes it as ISO-8601 with Z);
    None for none, and for a stored value no datetime can hold (NaN, 1e300)."""
    if ts is None:
        return None
    try:
        return datetime.fromtimestamp(ts, tz=UTC)
    except (ValueError, OverflowError, OSError, TypeError):
        return None


def clock(ts: float | datetime | None, *, date: bool = False) -> str:
    """A UTC wall-clock rendering for text output ("?" for a time no datetime holds)."""
    if ts is None:
        return "-"
    d = ts if isinstance(ts, datetime) else when(ts)
    if d is None:
        return "?"
    text = d.strftime("%Y-%m-%d %H:%M:%S" if date else "%H:%M:%S.%f")
    return text if date else text[:-3]


def seconds(value: float | None) -> str:
    """A duration people read at a glance: 4 ms, 1.25 s, 3 min 2 s."""
    if value is None:
        return "-"
    if value < 0.001:
        return f"{value * 1e6:.0f} µs"
    if value < 1:
        return f"{value * 1000:.0f} ms"
    if value < 120:
        return f"{value:.2f} s"
    if value < 7200:
        return f"{value // 60:.0f} min {value % 60:.0f} s"
    return f"{value / 3600:.1f} h"


def brief(value: Any, limit: int = 80) -> str:
    """A compact one-line rendering of a recorded value, cut to ``limit`` characters."""
    try:
        text = _json.encode(value).decode()
    except (TypeError, msgspec.EncodeError):
        text = repr(value)
    text = text.replace("\n", " ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def plural(n: int, word: str, many: str | None = None) -> str:
    """``1 retry``, ``2 retries``."""
    return f"{n} {word if n == 1 else (many or word + 's')}"


def short(run_id: str | None) -> str:
    return "-" if not run_id else run_id[:12]


# --- documents (the --json shapes of CONTRACT.md) --------------------------------------


def result_doc(r: RunResult) -> dict[str, Any]:
    return {
        "run_id": r.run_id,
        "status": r.status,
        "output": r.output,
        "error": r.error,
        "waiting": r.waiting,
    }


def run_doc(r: RunSummary, version: str | None = None) -> dict[str, Any]:
    """A run's document: the index's fields and the ``version`` its agent declared."""
    doc = {
        "run_id": r.run_id,
        "agent": r.agent,
        "status": r.status,
        "started_at": r.started_at,
        "updated_at": r.updated_at,
        "parent_run_id": r.parent_run_id,
        "version": version,
        "lineage": r.lineage,
    }
    if r.unreadable:
        doc["unreadable"] = r.unreadable
    return doc


# What the runs view adds to a run's document (the board's columns beyond the index's).
BOARD_FIELDS = (
    "position",
    "fork_position",
    "effects",
    "step",
    "steps_done",
    "steps_planned",
    "attempts",
    "tool_calls",
    "retries",
    "failures",
    "resumes",
    "owner",
    "imported",
    "last_event",
)


def board_doc(r: RunBoardRow) -> dict[str, Any]:
    """A run's document from the runs view: the index's fields, then the board's."""
    doc = run_doc(board_summary(r), r.version)
    doc.update((name, getattr(r, name)) for name in BOARD_FIELDS)
    return doc


def board_summary(r: RunBoardRow) -> RunSummary:
    """The board's row as the index would list it."""
    from engine.store import RunRow  # not at start-up: `agentlog --help` loads no store

    row = RunRow(r.run_id, r.agent, r.status, r.started_at, r.updated_at, r.parent_run_id)
    # The view names a child's or a fork's lineage, and none for a root.
    lineage = r.lineage or LineageKind.ROOT
    return RunSummary.of(msgspec.structs.replace(row, position=r.position, lineage=lineage))


def checkpoint_docs(refs: Iterable[CheckpointRef]) -> list[dict[str, Any]]:
    return [{"name": c.name, "position": c.position, "at": when(c.at)} for c in refs]


def state_doc(
    state: RunState, checkpoints: Iterable[CheckpointRef], input: dict[str, Any]
) -> dict[str, Any]:
    """Every field of the folded state (defaults included), times as ISO-8601 UTC, with
    what the log keeps beside it: the run's input and its checkpoints up to the state."""
    doc: dict[str, Any] = {f: getattr(state, f) for f in state.__struct_fields__}
    doc["waiting"], doc["wake_at"] = state.waiting, state.wake_at  # as read from waits_on
    doc["started_at"] = when(state.started_at)
    doc["updated_at"] = when(state.updated_at)
    doc["input"] = redact(input)  # secret fields are stored only encrypted
    doc["checkpoints"] = checkpoint_docs(checkpoints)
    doc["pending"] = [msgspec.to_builtins(p) for p in state.pending]
    return doc
