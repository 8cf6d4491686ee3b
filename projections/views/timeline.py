"""The timeline view: each run's events as users may see them, and its running tally.

A run has one tally row (position 0: its duration, status, attempts, retries, failure
kinds, resumes, checkpoints and fork lineage, and the last position folded) and one row
per :data:`CHUNK` positions holding those events whole (``agentlog timeline --json``
prints every field); an event over :data:`LARGE` bytes has a row of its own. Events are
stored as :func:`~engine.showing.shown` makes them, so an input's secret-named
fields are redacted here even where the log keeps them (sealed). A fork's inherited
events are real events of its stream and are kept with it. :func:`read` gives a run's
timeline only when the view provably holds all of it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import cast

import msgspec
from msgspec.structs import replace

from engine import events as ev
from engine.errors import CorruptData, StoreError
from engine.kinds import RunStatus
from engine.log.history import run_stream
from engine.showing import shown_event, utc
from engine.store import Store
from engine.store.ports import Column, ViewQuery

from ..fold import Envelope, Projection, RowDecoder, moved_status
from ..runner import Runner

CHUNK = 64  # events per row: a row per event would double the log's row count
LARGE = 16 * 1024  # bytes: an event larger than this has a row of its own (bounded chunks)


class Mark(msgspec.Struct, frozen=True, array_like=True):
    """A checkpoint: its name and position."""

    name: str
    position: int


class Figures(msgspec.Struct, frozen=True):
    """A run's timeline tally, as its summary line reads it. Inherited events (a fork's
    copies, counted in ``inherited``) are part of the timeline and counted too. Times
    are as the timeline shows them; ``odd`` says one was not a timestamp (the timeline
    refuses such a log, so the view cannot stand in for it)."""

    agent: str = ""
    parent_run_id: str | None = None
    fork_position: int | None = None
    inherited: int = 0
    status: str = RunStatus.RUNNING
    events: int = 0
    last: int = 0  # the last position folded
    started_at: float | None = None
    last_at: float | None = None  # the latest time not before the start
    calls: int = 0
    attempts: int = 0  # tool attempts that ended, in success or failure
    retries: int = 0
    failed_attempts: int = 0
    failures: dict[str, int] = {}  # failed attempts by kind
    failure: str | None = None  # the kind the run failed with, while failed
    resumes: int = 0
    checkpoints: tuple[Mark, ...] = ()
    odd: bool = False

    @property
    def duration(self) -> float:
        """Seconds from the first event to the latest one not before it."""
        if self.started_at is None:
            return 0.0
        return (self.last_at or self.started_at) - self.started_at


def shown_time(e: ev.Event) -> float | None:
    """The event's time as the timeline shows it (its UTC datetime's own rounding);
    None when it is not a timestamp."""
    try:
        return utc(e.at).timestamp()
    except (TypeError, ValueError, OverflowError, OSError):
        return None


def tally(f: Figures, position: int, e: ev.Event) -> Figures:
    """``f`` after the event at ``position``: pure, never raises."""
    return tally_at(f, position, e, shown_time(e))


def tally_at(f: Figures, position: int, e: ev.Event, at: float | None) -> Figures:
    """:func:`tally` given the event's :func:`shown_time` (a reader that shows the time
    has it already)."""
    changes: dict[str, object] = {"events": f.events + 1, "last": position}
    if at is None:
        changes["odd"] = True
    else:
        start = at if f.started_at is None else f.started_at
        changes["started_at"] = start
        if at >= start:
            changes["last_at"] = at
    status = moved_status(e)
    if status is not None:
        changes["status"] = status
        changes["failure"] = e.kind if isinstance(e, ev.AgentFailed) else None
    changes.update(_counts(f, position, e))
    return replace(f, **changes)


def _counts(f: Figures, position: int, e: ev.Event) -> dict[str, object]:
    if isinstance(e, ev.AgentStarted):
        return {
            "agent": e.agent,
            "parent_run_id": e.parent_run_id,
            "fork_position": e.fork_position,
            "inherited": e.inherited,
        }
    if isinstance(e, ev.ToolInvoked):
        return {"calls": f.calls + 1}
    if isinstance(e, ev.ToolSucceeded):
        return {"attempts": f.attempts + 1}
    if isinstance(e, ev.ToolFailed):
        kinds = {**f.failures, e.kind: f.failures.get(e.kind, 0) + 1}
        failed = f.failed_attempts + 1
        return {"attempts": f.attempts + 1, "failed_attempts": failed, "failures": kinds}
    if isinstance(e, ev.RetryScheduled):
        return {"retries": f.retries + 1}
    if isinstance(e, ev.AgentResumed):
        return {"resumes": f.resumes + 1}
    if isinstance(e, ev.Checkpoint):
        return {"checkpoints": (*f.checkpoints, Mark(e.name, position))}
    return {}


class Entry(msgspec.Struct, frozen=True, array_like=True):
    """One event of a run's timeline, as users may see it, at its position."""

    position: int
    event: ev.AnyEvent


class Row(msgspec.Struct, frozen=True):
    """A run's tally (``position`` 0) or a chunk of its events from ``position`` on."""

    run_id: str
    position: int
    figures: Figures | None = None
    entries: tuple[Entry, ...] = ()


def key(run_id: str, position: int, alone: bool = False) -> str:
    """The key of the run's tally (position 0), of its chunk from ``position``, or of
    the large event ``alone`` at ``position``."""
    return f"{run_id}:{position:012d}{'+' if alone else ''}"


def chunk_start(position: int) -> int:
    return (position - 1) // CHUNK * CHUNK + 1


_encoder = msgspec.msgpack.Encoder()


def _place(run_id: str, position: int, event: ev.Event) -> tuple[str, int]:
    """The key and position of the row an event goes to: its chunk's, or its own when
    it is large (a chunk of large events would be rewritten whole every batch)."""
    if len(_encoder.encode(event)) > LARGE:
        return key(run_id, position, alone=True), position
    start = chunk_start(position)
    return key(run_id, start), start


class View(Projection[Row]):
    name = "timeline"
    version = "1"
    row = Row
    columns = (Column("run_id"), Column("position", "int"))

    def keys(self, env: Envelope) -> Sequence[str]:
        if env.run is None or env.position < 1:
            return ()
        return (key(env.run.run_id, 0), _place(env.run.run_id, env.position, env.event)[0])

    def apply(self, rows: Mapping[str, Row | None], env: Envelope) -> Mapping[str, Row | None]:
        assert env.run is not None  # keys() named no rows otherwise
        run_id = env.run.run_id
        event = cast("ev.AnyEvent", shown_event(env.event))  # the log holds only these
        head_key = key(run_id, 0)
        chunk_key, start = _place(run_id, env.position, env.event)
        head = rows.get(head_key)
        figures = head.figures if head is not None and head.figures is not None else Figures()
        chunk = rows.get(chunk_key) or Row(run_id, start)
        return {
            head_key: Row(run_id, 0, figures=tally(figures, env.position, event)),
            chunk_key: replace(chunk, entries=(*chunk.entries, Entry(env.position, event))),
        }


# --- reading a run's timeline ----------------------------------------------------------


class Timeline(msgspec.Struct, frozen=True):
    """A run's timeline read from the view: its tally and its events in order."""

    figures: Figures
    entries: list[Entry]


_decode = RowDecoder(View.name, Row)


def read(store: Store, run_id: str) -> Timeline | None:
    """``run_id``'s timeline from the view, or None when the view cannot vouch for it:
    not built, or built by other code, behind the run (the run
    index, committed with the run's events, is read first), a row that does not decode,
    a gap in the positions, or a log that lost an event, at its end or before it (fewer
    events stored than its last position: the log reader refuses it)."""
    view = View()
    version = Runner(store, [view]).version(view)
    try:
        indexed = store.indexed_position(run_id)
        tracked = store.views.tracking(View.name)
        if not indexed or tracked is None or tracked.version != version:
            return None
        query = ViewQuery(equal={"run_id": run_id}, order_by="position", descending=False)
        rows = [_decode(body) for body in store.views.query(View.table(), query)]
        stream = run_stream(run_id)
        last = store.last_position(stream)
        # A log that lost an event, at its end or before: the log reader says where.
        if last < indexed or store.stream_length(stream) != last:
            return None
    except (StoreError, CorruptData):
        return None
    return _whole(rows, run_id, indexed)


def _whole(rows: Sequence[Row], run_id: str, indexed: int) -> Timeline | None:
    """The timeline in ``rows`` if it runs from position 1 to at least ``indexed``
    without a gap (events the view took in after the tally are left out)."""
    if not rows or rows[0].position != 0 or rows[0].figures is None:
        return None
    figures = rows[0].figures
    if figures.odd or figures.last < indexed or any(r.run_id != run_id for r in rows):
        return None
    found = (e for r in rows[1:] for e in r.entries if e.position <= figures.last)
    entries = sorted(found, key=attrgetter("position"))  # a large event's row sits apart
    if [e.position for e in entries] != list(range(1, figures.last + 1)):
        return None
    return Timeline(figures, entries)
