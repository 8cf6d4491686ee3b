"""Which run a stream belongs to. A run's stream opens with its ``AgentStarted`` (run id,
agent, parent, events inherited: facts the log itself holds, so a rebuild sees what the
first build saw). The run id is taken from it when the stream derives from that id; only
for logs written before it was kept does it come from the run index, whose row commits
with the run's first events and whose ``started_at`` is that event's time."""

from __future__ import annotations

import uuid
from collections.abc import Container, Iterable, Sequence

from engine.errors import UsageError
from engine.events import AgentStarted, Event
from engine.log.history import run_stream
from engine.store import Recorded, RunRow, Store

from .fold import RunFacts


class RunDirectory:
    """Stream id -> the run's facts. :meth:`learn` meets each new stream once: a stream
    that does not open with ``AgentStarted`` is no run's (a ledger or tool stream); a run's
    id is looked up among the index rows started at its first event's time (one narrow
    query per batch of new runs, not a read of the whole index)."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self.runs: dict[uuid.UUID, RunFacts] = {}
        self.not_runs: set[uuid.UUID] = set()

    def facts(self, stream: uuid.UUID) -> RunFacts | None:
        """The facts of ``stream``'s run (None: not a run's), met now if need be."""
        if stream not in self.runs and stream not in self.not_runs:
            self._meet({stream: self._opening(stream)})
        return self.runs.get(stream)

    def learn(self, records: Sequence[Recorded]) -> None:
        """Know every stream of ``records`` (read in global order)."""
        new = {r.stream for r in records}.difference(self.runs, self.not_runs)
        if not new:
            return
        first: dict[uuid.UUID, Recorded] = {}
        for r in records:
            if r.stream in new and r.stream not in first:
                first[r.stream] = r
        self._meet({s: r.event if r.position == 1 else self._opening(s) for s, r in first.items()})

    def _meet(self, openings: dict[uuid.UUID, Event | None]) -> None:
        """Know streams by their first events."""
        started: dict[uuid.UUID, AgentStarted] = {}
        for stream, opening in openings.items():
            if isinstance(opening, AgentStarted):
                started[stream] = opening
            else:
                self.not_runs.add(stream)
        if started:
            self._name(started)

    def _name(self, started: dict[uuid.UUID, AgentStarted]) -> None:
        """Name the streams in ``started`` by the run id their first event holds, or (a
        log from before it was kept, or an id that is not the stream's) in the run index."""
        ids = {s: e.run_id for s, e in started.items() if e.run_id and _derives(e.run_id, s)}
        old = {s: e for s, e in started.items() if s not in ids}
        if old:
            times = [e.at for e in old.values()]
            found = _ids(self.store.runs_started(min(times), max(times)), old)
            if len(found) < len(old):  # a row whose start differs: look at every row once
                found = _ids(self.store.runs(), old)
            ids.update(found)
        for stream, e in started.items():
            # No index row (a damaged index): the run's events still count, under a name
            # of its stream that no run id can be (ids start with a letter or digit), so
            # two such runs never share a row.
            name = ids.get(stream) or unindexed(stream)
            self.runs[stream] = RunFacts(name, e.agent, e.parent_run_id, e.inherited)

    def _opening(self, stream: uuid.UUID) -> Event | None:
        first = self.store.read(stream, upto=1)
        return first[0].event if first else None


def unindexed(stream: uuid.UUID) -> str:
    """The name a run's events go under when the run index has no row for it."""
    return "?" + stream.hex


def _derives(run_id: str, stream: uuid.UUID) -> bool:
    """Whether ``stream`` is the stream of the run ``run_id`` (a forged id is not)."""
    try:
        return run_stream(run_id) == stream
    except UsageError:
        return False


def _ids(rows: Iterable[RunRow], wanted: Container[uuid.UUID]) -> dict[uuid.UUID, str]:
    found: dict[uuid.UUID, str] = {}
    for row in rows:
        try:
            stream = run_stream(row.run_id)
        except UsageError:  # a damaged index row names no stream of ours
            continue
        if stream in wanted:
            found[stream] = row.run_id
    return found
