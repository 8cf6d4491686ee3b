"""Which run a stream belongs to: the run index answers it (its row commits with the
run's events, so a run's events are never visible before its row)."""

from __future__ import annotations

import uuid

from engine.errors import UsageError
from engine.events import AgentStarted
from engine.history import run_stream
from engine.store import Store

from .fold import RunFacts


class RunDirectory:
    """Stream id -> the run's facts, refreshed from the run index when an unknown stream
    appears; a stream still unknown after a refresh is not a run's (a ledger or tool
    stream) and is remembered as such."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.runs: dict[uuid.UUID, RunFacts] = {}
        self.not_runs: set[uuid.UUID] = set()

    def facts(self, stream: uuid.UUID) -> RunFacts | None:
        if stream in self.runs:
            return self.runs[stream]
        if stream in self.not_runs:
            return None
        self.refresh()
        found = self.runs.get(stream)
        if found is None:
            self.not_runs.add(stream)
        return found

    def refresh(self) -> None:
        for row in self.store.runs():
            try:
                stream = run_stream(row.run_id)
            except UsageError:  # a damaged index row names no stream of ours
                continue
            known = self.runs.get(stream)
            if known is not None and known.agent == row.agent:
                continue
            inherited = self._inherited(stream) if row.parent_run_id else 0
            self.runs[stream] = RunFacts(row.run_id, row.agent, row.parent_run_id, inherited)

    def _inherited(self, stream: uuid.UUID) -> int:
        first = self.store.read(stream, upto=1)
        event = first[0].event if first else None
        return event.inherited if isinstance(event, AgentStarted) else 0
