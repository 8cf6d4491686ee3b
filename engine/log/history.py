"""Reading and writing one run's history: the checked reader, state rebuild (snapshot +
tail) and the writer.

Every reader of a run stream goes through :class:`RunCheck`, so a damaged log (a gap in
positions, a missing or repeated ``agent_started``, an event after the run ended) raises
``CorruptData`` naming the run and the position. ``rebuild`` folds recorded facts onto
the newest snapshot at or before the target. ``RunWriter`` appends a run's events one
commit at a time, with the run index, and snapshots every N events and at checkpoints.
``checkpoints`` reads checkpoint occurrences from the log (a name is its latest one).
"""

from __future__ import annotations

import functools
import itertools
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from .. import events as ev
from .. import failpoints, observe
from ..errors import CorruptData, PayloadTooLarge, StoreError, UsageError
from ..events import Positioned
from ..kinds import FINAL
from ..store import Append, Fence, Recorded, Store, stream_id
from ..store.base import RunRow
from .rpo import Cadence, Rpo, replay_tail
from .runcheck import RunCheck
from .savetimes import FLUSH_AT, LAST_WRITE, SaveTimes, ms_since
from .snapshots import save_snapshot, snapshot_at_or_before
from .state import CheckpointRef, RunState, evolve, lineage_kind

DEFAULT_SNAPSHOT_EVERY = 100
# A checkpoint snapshots unless the newest snapshot is fewer than this many events back:
# its state then rebuilds from at most CHECKPOINT_GAP - 1 events, and a checkpoint-only
# run stores one ~150 B snapshot per 4 events of ~50 B (docs/bench_snapshots.md).
CHECKPOINT_GAP = 4
PAGE = 1000  # events per read when a reader streams a run
# A run id: what `agentlog` accepts as RUN, stores in the index and derives a stream from.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")


def check_run_id(run_id: str, what: str = "run id") -> str:
    """``run_id`` if it is a run id (1 to 128 of ``A-Z a-z 0-9 . _ : @ -``, starting with
    a letter or digit: a schedule's run is ``NAME@<tick>``); else ``UsageError``."""
    if isinstance(run_id, str) and RUN_ID.fullmatch(run_id) is not None:
        return run_id
    text = str(run_id)
    shown = repr(text[:40]) + ("..." if len(text) > 40 else "")
    raise UsageError(
        f"not a {what}: {shown} (1 to 128 letters, digits, '.', '_', ':', '@' or '-', "
        "starting with a letter or digit)"
    )


@functools.lru_cache(maxsize=4096)
def run_stream(run_id: str) -> uuid.UUID:
    """The stream of a run, derived from the name ``run:<id>`` in the namespace of every
    named stream: no run id can address a ledger (``effect:``), tool or blob stream."""
    return stream_id("run:" + check_run_id(run_id))


@dataclass(frozen=True)
class RunLog:
    """A run's whole history, checked, and the state it folds to."""

    run_id: str
    recorded: list[Recorded]
    state: RunState

    @property
    def started(self) -> ev.AgentStarted:
        """The run's ``agent_started`` (``read_run`` checked that it comes first)."""
        return _as_started(self.run_id, self.recorded[0].event)


def _as_started(run_id: str, first: ev.Event) -> ev.AgentStarted:
    if not isinstance(first, ev.AgentStarted):  # RunCheck refuses this; for the type
        raise RunCheck(run_id).corrupt(1, "the log does not begin with agent_started")
    return first


def read_stream(
    store: Store, run_id: str, after: int = 0, upto: int | None = None
) -> list[Recorded]:
    """The run's stored events with ``after < position <= upto``, unchecked; an event that
    does not decode is ``CorruptData`` naming the run and its position."""
    stream = run_stream(run_id)
    try:
        return store.read(stream, after=after, upto=upto)
    except CorruptData as e:
        where = _undecodable(store, stream, after, upto or store.last_position(stream))
        raise RunCheck(run_id).corrupt(where, str(e)) from e


def _undecodable(store: Store, stream: uuid.UUID, after: int, upto: int) -> int:
    """The first position in ``after < position <= upto`` whose event does not decode,
    read one at a time (only once a read of them all has failed)."""
    for position in range(after + 1, upto + 1):
        try:
            store.read(stream, after=position - 1, upto=position)
        except CorruptData:
            return position
    return after + 1  # it decoded on a second read: say where the failed read began


def read_events(store: Store, run_id: str) -> list[Recorded]:
    """The run's recorded events, read whole and checked. A run known to the index whose
    stream is empty is damaged too."""
    recorded = read_stream(store, run_id)
    if not recorded:
        raise RunCheck(run_id).corrupt(1, "the run has no events")
    RunCheck(run_id)(recorded)
    check_tail(store, run_id, recorded[-1].position)
    return recorded


def check_tail(store: Store, run_id: str, last: int) -> None:
    """CorruptData if the run index, written in the same commit as the run's events, saw
    the run reach past ``last``: events at the end of the stream are gone."""
    indexed = store.indexed_position(run_id)
    if indexed is None or indexed <= last:
        return
    # Appended while the events were read: the index row commits with its events, so
    # read after it the stream reaches it, unless its last events are really gone.
    if store.last_position(run_stream(run_id)) < indexed:
        raise RunCheck(run_id).corrupt(
            last + 1, f"it is missing (the run index recorded the run at position {indexed})"
        )


def read_run(store: Store, run_id: str) -> RunLog:
    """The run's recorded events, checked as read, and their fold."""
    recorded = read_events(store, run_id)
    state = RunState(run_id=run_id)
    for r in recorded:
        state = evolve(state, r.event, r.position)
    return RunLog(run_id, recorded, state)


def iter_run(
    store: Store, run_id: str, *, upto: int | None = None, page: int = PAGE
) -> Iterator[Recorded]:
    """The run's events in order (up to ``upto``), read ``page`` at a time and checked."""
    stream, check = run_stream(run_id), RunCheck(run_id)
    while True:
        start = check.position
        end = start + page if upto is None else min(upto, start + page)
        batch = check(read_stream(store, run_id, start, end)) if end > start else []
        if start == 0 and not batch:
            raise check.corrupt(1, "the run has no events")
        yield from batch
        if upto is not None and check.position >= upto:
            return
        if len(batch) < end - start:  # the stream ends here, unless rows after a gap remain
            if upto is not None or store.last_position(stream) > check.position:
                raise check.corrupt(check.position + 1, "it is missing")
            check_tail(store, run_id, check.position)
            return


def _contiguous(store: Store, run_id: str) -> None:
    """CorruptData naming the first missing position if the stream holds fewer events than
    its last position (a snapshot stands in for events that are gone). The last position
    is read first: an event appended in between only makes the count larger."""
    stream = run_stream(run_id)
    last = store.last_position(stream)
    if store.stream_length(stream) < last:
        for _ in iter_run(store, run_id):  # reads until the gap, which it names
            pass


def rebuild(store: Store, run_id: str, upto: int | None = None) -> RunState:
    """The state of ``run_id`` after position ``upto`` (latest when None); the tail read
    after the snapshot must continue it exactly."""
    stream = run_stream(run_id)
    base = snapshot_at_or_before(store, stream, upto) or RunState(run_id=run_id)
    state = base
    if base.position:
        _contiguous(store, run_id)
    for r in RunCheck.after(base)(read_stream(store, run_id, base.position, upto)):
        state = evolve(state, r.event, r.position)
    if upto is not None and 0 < state.position < upto:
        raise RunCheck(run_id).corrupt(state.position + 1, "it is missing")
    if upto is None and state.position > 0:
        check_tail(store, run_id, state.position)
    return state


def started(store: Store, run_id: str) -> ev.AgentStarted:
    """The run's ``agent_started`` (its agent, input and lineage), read and checked alone:
    the input is stored there once, never in the state."""
    return _as_started(run_id, next(iter_run(store, run_id, upto=1)).event)


def checkpoint_refs(records: Iterable[Positioned]) -> list[CheckpointRef]:
    """The checkpoint occurrences among a run's records, in log order."""
    return [
        CheckpointRef(r.event.name, r.position, r.event.at)
        for r in records
        if isinstance(r.event, ev.Checkpoint)
    ]


def checkpoints(store: Store, run_id: str, upto: int | None = None) -> list[CheckpointRef]:
    """Every checkpoint occurrence of the run (up to position ``upto``), in log order,
    read from its checked log: the index of positions by name is the log itself."""
    records = iter_run(store, run_id)
    if upto is not None:  # an ``upto`` past the run's end is the whole run, not a gap
        records = itertools.takewhile(lambda r: r.position <= upto, records)
    return checkpoint_refs(records)


def resolve_position(
    state: RunState, at: int | str | None, records: Iterable[Positioned] = ()
) -> int | None:
    """A position from a number, an all-digit string or a checkpoint name, whose latest
    occurrence among ``records`` (the run's log, read only for a name) wins."""
    if at is None:
        return None
    if isinstance(at, int) or (isinstance(at, str) and at.isascii() and at.isdigit()):
        pos = int(at)
        if not 1 <= pos <= state.position:
            raise UsageError(f"position {pos} is outside the run (1..{state.position})")
        return pos
    refs = list(checkpoint_refs(records))
    found = next((ref.position for ref in reversed(refs) if ref.name == at), None)
    if found is None:
        known = ", ".join(repr(n) for n in dict.fromkeys(r.name for r in refs)) or "none"
        raise UsageError(f"no checkpoint named {at!r} in run {state.run_id} (it has: {known})")
    return found


def state_at(store: Store, run_id: str, at: int | str | None = None) -> RunState:
    """Folded state at a position, a checkpoint name, or the latest."""
    latest = rebuild(store, run_id)
    if latest.position == 0:
        raise UsageError(f"run {run_id} has no events")
    # A generator: the log is read only when ``at`` is a checkpoint name.
    pos = resolve_position(latest, at, iter_run(store, run_id, upto=latest.position))
    return latest if pos is None or pos == latest.position else rebuild(store, run_id, pos)


def checkpoint_due(event: ev.Event, position: int, last: int) -> bool:
    """Whether ``event``, a checkpoint recorded at ``position``, is snapshotted: unless
    the newest snapshot (at ``last``) is fewer than ``CHECKPOINT_GAP`` events back."""
    return isinstance(event, ev.Checkpoint) and position - last >= CHECKPOINT_GAP


def cadence_due(before: int, after: int, every: int) -> bool:
    """Whether a commit taking a run from position ``before`` to ``after`` crosses a
    multiple of ``every``: the writer's regular snapshot."""
    return after // every > before // every


def snapshots_along(
    state: RunState, events: Iterable[ev.Event], every: int = DEFAULT_SNAPSHOT_EVERY
) -> tuple[RunState, list[RunState]]:
    """Fold ``events`` onto ``state`` one commit each, as a writer appending them one at
    a time would: the final state and the states it would have snapshotted."""
    due: list[RunState] = []
    last = 0
    for e in events:
        before = state.position
        state = evolve(state, e, before + 1)
        if checkpoint_due(e, state.position, last) or cadence_due(before, state.position, every):
            due.append(state)
            last = state.position
    return state, due


class RunWriter:
    """Appends one run's events; each ``append`` is one commit of the log. After the
    commit it snapshots every ``snapshot_every`` events, and at a checkpoint unless the
    newest snapshot is fewer than ``CHECKPOINT_GAP`` events back. A measured append (the
    run context's) times its checkpoints and snapshots (engine.log.savetimes). ``rpo``
    adds snapshots by calls or by time (``clock``), as ``engine.log.rpo.Cadence`` says.

    ``fence``: the epoch of the run's lease its owner took (``Leases.fence``); every
    commit carries it, and the store refuses one (``LeaseTaken``, nothing written) once
    another owner took the run over. None (a writer whose engine holds no lease of the
    run: an import, a check replaying a log) checks nothing."""

    def __init__(
        self,
        store: Store,
        state: RunState,
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        fence: Fence | None = None,
        rpo: Rpo | None = None,
        clock: Callable[[], float] = time.monotonic,
        began: float | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.wall = wall  # the engine's wall clock (EngineConfig.wall): dates its events
        self.began = began  # when the resume that loaded ``state`` began reading it
        self.state = state
        self.fence = fence
        self.stream = run_stream(state.run_id)
        self.snapshot_every = max(1, snapshot_every)
        # The newest snapshot this writer knows of. A state loaded elsewhere may have none
        # near it, so count from the run's start: at worst one extra snapshot.
        self.snapshot_at = 0
        self.timings = SaveTimes()  # measured, not recorded yet
        self.rpo = None if rpo is None else Cadence(rpo, clock, fresh=state.position == 0)

    def append(
        self,
        *events: ev.Event,
        extra: Sequence[Append] = (),
        measure: bool = False,
        rows: Sequence[RunRow] = (),
    ) -> RunState:
        """One commit of ``events``, ``extra`` (other streams') and ``rows`` (index rows)."""
        held = self.timings.held if measure else 0  # inline checks: the hot path
        flush = held and (held >= FLUSH_AT or (events and type(events[-1]) in LAST_WRITE))
        if flush and self.state.status not in FINAL:
            events = self.timings.riding(events, self.wall())
        state = self.state
        items = list(extra)
        due: list[RunState] = []  # the checkpoints' states to snapshot once committed
        marks = 0  # checkpoints in this commit
        last = self.snapshot_at
        for e in events:
            state = evolve(state, e, state.position + 1)
            items.append(Append(self.stream, state.position, e))
            if type(e) is ev.Checkpoint:  # checkpoint_due, inline (hot path; no subclasses)
                marks += 1
                if state.position - last >= CHECKPOINT_GAP:
                    due.append(state)
                    last = state.position
        # The index row rides in every commit of the run, so `runs` shows its live
        # position and last activity, not just its last change of status.
        runs = (self.index_row(state), *rows) if events else tuple(rows)
        began = time.perf_counter() if marks else 0.0
        self.store.append(items, runs=runs, fence=self.fence)
        commit_ms = ms_since(began) if marks else 0.0
        before = self.state.position
        self.state = state
        if flush:
            self.timings = SaveTimes()
        cadence = cadence_due(before, state.position, self.snapshot_every) or (
            self.rpo is not None and state.position > before and self.rpo.due(state)
        )
        marked = len(due)  # due[:marked] are checkpoints' states
        if cadence and (not due or due[-1] is not state):  # a checkpoint may end the batch
            due.append(state)
        if due or marks:
            took = [self._snapshot(snap) for snap in due]
            if measure:
                self.timings.add(marks, commit_ms, took, marked)
        return state

    def _snapshot(self, state: RunState) -> float | None:
        """Store a snapshot of ``state``; how long it took (ms), None if it was not stored."""
        failpoints.hit("in_snapshot")  # events committed, snapshot not yet written
        began = time.perf_counter()
        if self.rpo is not None:  # even if it fails: a too large one is not retried each commit
            self.rpo.taken(state)
        try:
            save_snapshot(self.store, self.stream, state)
        except (PayloadTooLarge, StoreError) as e:
            # The events are committed; a snapshot is only a shortcut for rebuilds.
            # Raising here would report a committed append as failed (and its caller
            # would write the same events again).
            observe.get().warning("snapshot_too_large", stream=str(self.stream), error=str(e))
            return None
        self.snapshot_at = state.position
        return ms_since(began)

    def resumed(self, at: float, owner: str) -> ev.AgentResumed:
        """A resume's marker, measured at its first commit: the tail past the newest
        snapshot it folded again (None if unreadable), the seconds since it began."""
        took = None if self.began is None else round(max(0.0, self.wall() - self.began), 6)
        try:
            tail = replay_tail(self.store, self.stream, self.state)
        except StoreError:  # a measure, not a fact of the run: never what stops a resume
            tail = None
        return ev.AgentResumed(at=at, owner=owner, replayed=tail, recovery_s=took)

    @staticmethod
    def index_row(state: RunState) -> RunRow:
        return RunRow(
            run_id=state.run_id,
            agent=state.agent,
            status=state.status,
            started_at=state.started_at or 0.0,
            updated_at=state.updated_at or 0.0,
            parent_run_id=state.parent_run_id,
            position=state.position,
            lineage=lineage_kind(state.lineage),
        )
