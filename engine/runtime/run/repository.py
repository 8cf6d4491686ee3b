"""One way to load a run: its checked history, state and start, the agent that runs it,
its journal and a writer, as one :class:`LoadedRun`.

Resume, verify, answer, abandon and rewind all load a run here, so each refuses a damaged
log (``CorruptData``) and an imported run nobody adopted the same way, before anything
acts on it.
"""

from __future__ import annotations

import contextlib
import functools
import time
from collections.abc import Callable

from ... import events as ev
from ...log.history import RunLog, RunWriter, read_run
from ...log.state import RunState
from ...store import Recorded, Store
from ..defs import registry
from ..defs.definitions import AgentDef
from ..host.leases import Leases
from ..journal.recorded import Journal
from . import adoption
from .catalog import Catalog
from .results import RunResult


class LoadedRun:
    """A run read once. The agent, journal and writer are built on first use, so a refusal
    that needs only the log (a finished run, a run not waiting) never imports agent code."""

    def __init__(
        self,
        store: Store,
        log: RunLog,
        act: str,
        known: registry.Registry | None = None,
        leases: Leases | None = None,
        clock: Callable[[], float] = time.monotonic,
        began: float | None = None,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.clock = clock  # the engine's (EngineConfig.clock): an rpo="30s" cadence reads it
        self.wall = wall  # the engine's (EngineConfig.wall): the writer dates events by it
        self.began = began  # when loading it began (epoch s): a resume's RTO counts from it
        self._leases = leases  # whose hold of the run, if any, fences the writer
        self._known = known  # the running engine's definitions, looked up first
        self.run_id: str = log.run_id
        self.recorded: list[Recorded] = log.recorded
        self.state: RunState = log.state
        self.started: ev.AgentStarted = log.started
        # Who runs it: the adopter's choice, else its start's; an imported run nobody
        # adopted is refused here, naming ``act`` (what was asked of it).
        self.agent_name, self.import_path = adoption.runs_as(self.state, self.recorded, act)

    @functools.cached_property
    def agent(self) -> AgentDef:
        """The agent definition that runs the run (its module imported if need be)."""
        return registry.load_agent(self.agent_name, self.import_path, self._known)

    @functools.cached_property
    def journal(self) -> Journal:
        """The run's recorded calls, for re-execution."""
        return Journal.from_events(self.recorded)

    @functools.cached_property
    def writer(self) -> RunWriter:
        """The writer that appends to the run, at its agent's snapshot cadence and RPO,
        fenced by the run's lease if this engine holds it (built under the hold: ``held``)."""
        fence = self._leases.fence(self.run_id) if self._leases is not None else None
        a = self.agent
        return RunWriter(
            self.store,
            self.state,
            snapshot_every=a.snapshot_every,
            fence=fence,
            rpo=a.rpo,
            clock=self.clock,
            began=self.began,
            wall=self.wall,
        )


def result_of(state: RunState) -> RunResult:
    """A run's result as its folded state tells it."""
    return RunResult(
        state.run_id,
        state.status,
        state.output,
        state.error,
        state.waiting,
        parent_run_id=state.parent_run_id,
    )


class RunRepository:
    """The runs of one store: which run an id names, its owner lease, loading it."""

    def __init__(
        self,
        catalog: Catalog,
        leases: Leases,
        known: registry.Registry | None = None,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self._catalog = catalog
        self.leases = leases
        self.known = known  # the running engine's tools and agents
        self.clock = clock  # the engine's monotonic clock, for its writers' RPO cadence
        self.wall = wall  # the engine's wall clock, which dates every event its writers make

    @property
    def store(self) -> Store:
        return self._catalog.store

    def resolve(self, run_id: str) -> str:
        """The full id of the run ``run_id`` names (an id or a unique prefix)."""
        return self._catalog.resolve(run_id)

    def held(self, run_id: str) -> contextlib.AbstractContextManager[None]:
        """Hold the run's owner lease for the block (RunBusy if a live owner has it)."""
        return self.leases.hold(self.store, run_id)

    def load(self, run_id: str, act: str) -> LoadedRun:
        """The run ``run_id`` (a full id), read and checked; refuses an imported run nobody
        adopted, saying it cannot ``act`` ("be resumed", "be answered", ...)."""
        began = self.wall()
        log = read_run(self.store, run_id)
        return LoadedRun(
            self.store, log, act, self.known, self.leases, self.clock, began, self.wall
        )
