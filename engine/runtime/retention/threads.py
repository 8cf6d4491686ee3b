"""LangGraph threads at prune time. A thread's run (agent ``langgraph:<name>``) is never
executed by an engine, so its row says running for as long as the thread lives. Once its
last event is a whole-thread ``graph_forgotten`` (``delete_thread``, ``prune`` with
``delete``), the thread is over: prune counts it completed, last updated at its
deletion, and frees its rows like any finished run's. A put after the prune starts the
thread's run again; one after the plan makes the prune leave it (its position moved)."""

from __future__ import annotations

from collections.abc import Sequence

import msgspec

from ...events import GraphForgotten
from ...events.graphs import THREAD_AGENT
from ...kinds import RunStatus
from ...log.history import run_stream
from ...store import RunRow, Store

__all__ = ["as_finished"]


def as_finished(store: Store, rows: Sequence[RunRow]) -> tuple[list[RunRow], dict[str, str]]:
    """``rows`` with each deleted thread's run shown completed, and those runs' stored
    statuses (what the prune's transaction must still find)."""
    shown: list[RunRow] = []
    stored: dict[str, str] = {}
    for row in rows:
        if _deleted(store, row):
            stored[row.run_id] = row.status
            row = msgspec.structs.replace(row, status=RunStatus.COMPLETED)
        shown.append(row)
    return shown, stored


def _deleted(store: Store, row: RunRow) -> bool:
    if not row.agent.startswith(THREAD_AGENT) or row.status != RunStatus.RUNNING:
        return False
    last = store.read(run_stream(row.run_id), after=max(row.position - 1, 0))
    if not last:
        return False
    e = last[-1].event
    return isinstance(e, GraphForgotten) and not e.runs and not e.pruned
