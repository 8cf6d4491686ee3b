"""The in-memory store: eventsourcing's POPO recorders plus a run index under one lock."""

from __future__ import annotations

from bisect import bisect_right, insort
from collections import defaultdict
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import StoredEvent
from eventsourcing.popo import POPOAggregateRecorder, POPOApplicationRecorder

from .base import RunRow, Store


class _Bisected(POPOAggregateRecorder):
    """POPO's recorder reading by bisection over each stream's sorted positions: a read
    after a snapshot costs O(tail), and rows come in position order whatever order they
    were inserted in (POPO follows insertion order)."""

    def __init__(self) -> None:
        super().__init__()
        self._positions: defaultdict[str, list[int]] = defaultdict(list)

    def _update_table(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._update_table(stored_events, **kwargs)
        for s in stored_events:
            insort(self._positions[str(s.originator_id)], s.originator_version)
        return ids

    def select_events(
        self,
        originator_id: UUID | str,
        *,
        gt: int | None = None,
        lte: int | None = None,
        desc: bool = False,
        limit: int | None = None,
    ) -> Sequence[StoredEvent]:
        key = str(originator_id)
        with self._database_lock:
            positions = self._positions.get(key, [])
            lo = 0 if gt is None else bisect_right(positions, gt)
            hi = len(positions) if lte is None else bisect_right(positions, lte)
            if limit is not None:
                if desc:
                    lo = max(lo, hi - limit)
                else:
                    hi = min(hi, lo + limit)
            chosen = positions[lo:hi]
            if desc:
                chosen.reverse()
            index = self._stored_events_index[key] if chosen else {}
            return [self._stored_events[index[p]] for p in chosen]


class MemoryEventRecorder(_Bisected, POPOApplicationRecorder):
    """POPO events recorder whose inserts also upsert the run index, atomically."""

    def __init__(self) -> None:
        super().__init__()
        self._runs: dict[str, RunRow] = {}
        self._leases: dict[str, tuple[str, float]] = {}

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

    def select_run_position(self, run_id: str) -> int | None:
        with self._database_lock:
            row = self._runs.get(run_id)
            return None if row is None else row.position

    def select_run_ids(self, prefix: str) -> list[str]:
        with self._database_lock:
            return sorted(k for k in self._runs if k.startswith(prefix))[:10]

    def take_lease(self, run_id: str, owner: str, until: float, now: float, dead: str) -> str:
        with self._database_lock:
            held = self._leases.get(run_id)
            if held is None or held[1] < now or held[0] in (owner, dead):
                self._leases[run_id] = (owner, until)
            return self._leases[run_id][0]

    def drop_lease(self, run_id: str, owner: str) -> None:
        with self._database_lock:
            if self._leases.get(run_id, ("",))[0] == owner:
                del self._leases[run_id]

    def select_lease(self, run_id: str) -> tuple[str, float] | None:
        with self._database_lock:
            return self._leases.get(run_id)


class MemoryAggregateRecorder(_Bisected):
    """The memory snapshots and blobs recorder."""


def open_memory(name: str, **options: Any) -> Store:
    return Store(
        name, MemoryEventRecorder(), MemoryAggregateRecorder(), MemoryAggregateRecorder(), **options
    )
