"""Reading and writing one run's history: state rebuild (snapshot + tail) and the writer.

``rebuild`` never calls a tool or a model; it folds recorded facts onto the newest
snapshot at or before the target. ``RunWriter`` appends a run's events one commit at a
time, keeps the run index in the same commit, and snapshots every N events and at every
named checkpoint.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from . import events as ev
from . import failpoints, log
from .errors import PayloadTooLarge, StoreError, UsageError
from .state import RunState, evolve
from .store import Append, Store
from .store.base import RunRow

DEFAULT_SNAPSHOT_EVERY = 100


_RUN_NS = uuid.UUID("0b7f5a2c-3f7e-4d8e-9a7c-2f1d3e4b5a60")


def run_stream(run_id: str) -> uuid.UUID:
    """The stream of a run: its uuid when the id is 32 hex digits, else derived from it."""
    if len(run_id) == 32:
        try:
            return uuid.UUID(hex=run_id)
        except ValueError:
            pass
    if not run_id or len(run_id) > 200:
        raise UsageError(f"not a run id: {run_id!r}")
    return uuid.uuid5(_RUN_NS, run_id)


def rebuild(store: Store, run_id: str, upto: int | None = None) -> RunState:
    """The state of ``run_id`` after position ``upto`` (latest when None)."""
    stream = run_stream(run_id)
    base = store.snapshot_at_or_before(stream, upto) or RunState(run_id=run_id)
    state = base
    for r in store.read(stream, after=base.position, upto=upto):
        state = evolve(state, r.event, r.position)
    return state


def resolve_position(state: RunState, at: int | str | None) -> int | None:
    """A position from a number, an all-digit string or a checkpoint name (latest wins)."""
    if at is None:
        return None
    if isinstance(at, int) or (isinstance(at, str) and at.isascii() and at.isdigit()):
        pos = int(at)
        if not 1 <= pos <= state.position:
            raise UsageError(f"position {pos} is outside the run (1..{state.position})")
        return pos
    for ref in reversed(state.checkpoints):
        if ref.name == at:
            return ref.position
    raise UsageError(f"no checkpoint named {at!r} in run {state.run_id}")


def state_at(store: Store, run_id: str, at: int | str | None = None) -> RunState:
    """Folded state at a position, a checkpoint name, or the latest."""
    latest = rebuild(store, run_id)
    if latest.position == 0:
        raise UsageError(f"run {run_id} has no events")
    pos = resolve_position(latest, at)
    return latest if pos is None or pos == latest.position else rebuild(store, run_id, pos)


class RunWriter:
    """Appends one run's events; each ``append`` is one commit of the log."""

    def __init__(
        self, store: Store, state: RunState, *, snapshot_every: int = DEFAULT_SNAPSHOT_EVERY
    ) -> None:
        self.store = store
        self.state = state
        self.stream = run_stream(state.run_id)
        self.snapshot_every = max(1, snapshot_every)

    def append(self, *events: ev.Event, extra: Sequence[Append] = ()) -> RunState:
        """Record ``events`` (and ``extra`` events of other streams) in one transaction."""
        state = self.state
        items = list(extra)
        for e in events:
            state = evolve(state, e, state.position + 1)
            items.append(Append(self.stream, state.position, e))
        # The index row rides in every commit of the run, so `runs` shows its live
        # position and last activity, not just its last change of status.
        runs = (self.index_row(state),) if events else ()
        self.store.append(items, runs=runs)
        before = self.state.position
        self.state = state
        crossed = state.position // self.snapshot_every > before // self.snapshot_every
        if crossed or any(isinstance(e, ev.Checkpoint) for e in events):
            failpoints.hit("in_snapshot")  # events committed, snapshot not yet written
            try:
                self.store.save_snapshot(self.stream, state)
            except (PayloadTooLarge, StoreError) as e:
                # The events are committed; a snapshot is only a shortcut for rebuilds.
                # Raising here would report a committed append as failed (and its caller
                # would write the same events again).
                log.get().warning("snapshot_too_large", stream=str(self.stream), error=str(e))
        return state

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
        )
