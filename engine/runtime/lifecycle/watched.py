"""An execution its engine's observers watch (engine.observe): what it records, as
committed, and the trace context it notes in its log with its first commit."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ... import events as ev
from ... import observe
from ...log.state import RunState
from ...store import Append
from ..host.port import Host
from ..run.context import RunContext


def watch(host: Host, agent: str, state: RunState, *, resumed: bool) -> observe.Watch:
    """The observers' watch of the execution of the run in ``state`` about to begin."""
    if not host.observers:
        return observe.UNWATCHED
    execution = observe.Execution(
        state.run_id,
        agent,
        state.resumes + (2 if resumed else 1),
        resumed=resumed,
        parent_run_id=state.parent_run_id,
        origin=state.trace_origin,
        previous=state.trace,
        pending=frozenset(p.call for p in state.pending if p.side_effect),
    )
    return host.observers.execution(execution)


class Watched(RunContext):
    """A run context whose commits its watch sees (scrubbed of the secrets it saw)."""

    noted = False  # whether this execution's trace context is in the log

    def _commit(self, events: Sequence[ev.Event], extra: Sequence[Append], rows: Any) -> None:
        seen = self.watch
        if seen is observe.UNWATCHED:
            return super()._commit(events, extra, rows)
        if not self.noted and seen.trace:
            events = (ev.TraceNoted(at=self.config.wall(), trace=seen.trace), *events)
        batch = tuple(map(self.seen.scrub, (*self.pending.events, *events)))
        super()._commit(events, extra, rows)
        self.noted = True
        seen.recorded(batch)
        return None
