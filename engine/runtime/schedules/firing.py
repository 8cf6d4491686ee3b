"""What a worker does with the schedules at each turn of its loop: enqueue every due
tick as the run ``NAME@<tick>``, and say how long it may sleep until the next one.

Exactly once across workers and restarts rests on the run id: every worker that sees a
tick enqueues the same id, and enqueueing an id that exists starts nothing. The last
tick enqueued is recorded on the schedule (it only moves forward) so a worker that
starts later knows which ticks it missed; what it was watching itself is its own.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, Protocol

from ... import observe
from ...errors import AgentlogError, ConcurrencyError, CorruptData, UsageError
from ...policy.failure import describe
from ...store import Store
from ..defs.definitions import AgentDef
from ..defs.registry import Registry, load_agent
from .cadence import due, next_tick, tick_id
from .define import Schedule, decode

__all__ = ["Enqueuing", "Ticker"]

# How long a worker leaves alone a schedule whose agent it could not import before it
# tries again (a deploy may bring the module; meanwhile no warning every pass).
LOOK_AGAIN = 30.0


class Enqueuing(Protocol):
    """What the ticker needs of an engine: its store, its agents and ``enqueue``."""

    @property
    def store(self) -> Store: ...

    registry: Registry

    def enqueue(
        self, agent: AgentDef[..., Any], /, *, queue: str, run_id: str, **input: Any
    ) -> object: ...


class Ticker:
    """The schedules as one worker sees them: since when it has watched each (a tick
    after that came while it ran, so it is due even if the loop was late), and the
    wall clock it reads (the engine's ``config.wall``)."""

    def __init__(self, engine: Enqueuing, wall: Callable[[], float]) -> None:
        self._engine = engine
        self._wall = wall
        self._watched: dict[str, float] = {}
        self._cannot: dict[str, float] = {}  # schedule -> when its agent did not import

    def fire(self) -> float | None:
        """Enqueue every due tick of every schedule; the seconds until the next tick of
        any schedule (0 if one is due now), or None when there is no schedule. A schedule
        this process cannot import the agent of is left to a worker that can."""
        now = self._wall()
        try:
            schedules = self._schedules()
        except AgentlogError as e:  # a store blip: the next turn looks again
            observe.get().warning("schedules_not_read", error=str(e))
            return None
        self._watched = {n: t for n, t in self._watched.items() if n in schedules}
        for s in schedules.values():
            if now - self._cannot.get(s.name, -LOOK_AGAIN) < LOOK_AGAIN:
                continue  # left to a worker that imports its agent
            try:
                self._fire(s, now)
            except AgentlogError as e:  # tried again at the next turn: nothing was skipped
                observe.get().warning("schedule_not_fired", schedule=s.name, error=str(e))
        upcoming = [t for s in schedules.values() if (t := next_tick(s.cadence, now)) is not None]
        return max(0.0, min(upcoming) - self._wall()) if upcoming else None

    def _schedules(self) -> dict[str, Schedule]:
        found = {}
        for row in self._engine.store.schedules.all():
            try:
                found[row.name] = decode(row)
            except CorruptData as e:  # one damaged row stops no other schedule
                observe.get().warning("schedule_skipped", schedule=row.name, error=str(e))
        return found

    def _fire(self, s: Schedule, now: float) -> None:
        watched = self._watched.get(s.name)
        since = None if watched is None else max(watched, s.created_at)  # made again since
        ticks = due(s.cadence, last=s.since, now=now, watched_since=since, catch_up=s.catch_up)
        if ticks:
            try:
                agent = load_agent(s.agent, s.import_path, self._engine.registry)
            except UsageError:
                self._cannot[s.name] = now
                raise
            except Exception as e:  # its module raised as it was imported: left alone too
                self._cannot[s.name] = now
                raise UsageError(f"cannot import agent {s.agent}: {describe(e)}") from None
            self._cannot.pop(s.name, None)
            for t in ticks:
                self._enqueue(s, agent, t)
            self._engine.store.schedules.advance(s.name, ticks[-1])
        self._watched[s.name] = now if watched is None else max(watched, now)

    def _enqueue(self, s: Schedule, agent: AgentDef[..., Any], tick: float) -> None:
        run_id = tick_id(s.name, tick)
        # Another worker enqueuing this tick first loses nothing: its run is the tick's run.
        with contextlib.suppress(ConcurrencyError):
            self._engine.enqueue(agent, queue=s.queue, run_id=run_id, **s.input)
