"""The in-memory store: eventsourcing's POPO recorders plus a run index under one lock."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import StoredEvent
from eventsourcing.popo import POPOAggregateRecorder, POPOApplicationRecorder

from .base import RunRow, Store


class MemoryEventRecorder(POPOApplicationRecorder):
    """POPO events recorder whose inserts also upsert the run index, atomically."""

    def __init__(self) -> None:
        super().__init__()
        self._runs: dict[str, RunRow] = {}

    def _insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        with self._database_lock:
            ids = super()._insert_events(stored_events, **kwargs)
            for row in kwargs.get("runs", ()):
                self._runs.pop(row.run_id, None)
                self._runs[row.run_id] = row
            return ids

    def select_runs(self, status: str | None) -> list[RunRow]:
        with self._database_lock:
            rows = [r for r in self._runs.values() if status is None or r.status == status]
        rows.sort(key=lambda r: (r.started_at, r.run_id), reverse=True)
        return rows

    def select_run_ids(self, prefix: str) -> list[str]:
        with self._database_lock:
            return [k for k in self._runs if k.startswith(prefix)][:10]


def open_memory(name: str, **options: Any) -> Store:
    return Store(
        name, MemoryEventRecorder(), POPOAggregateRecorder(), POPOAggregateRecorder(), **options
    )
