"""The queue tables in memory: one lock serializes every claim, as on the SQL backends."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Protocol

import msgspec

from .ports import RunIndex
from .queueing import QueueLimits, QueueRow, QueueStore, WorkerRow


class _Leases(Protocol):
    def lease(self, run_id: str) -> tuple[str, float] | None: ...
    def take_lease(
        self, run_id: str, owner: str, until: float, now: float, dead: str = ""
    ) -> str: ...
    def held_by(self, now: float) -> dict[str, int]: ...


class MemoryQueues(QueueStore):
    """Queue rows, limits and workers in dicts; claims read the run index and take leases
    of the store's own lease table under its lock."""

    def __init__(self, runs: RunIndex, leases: _Leases) -> None:
        self.lock = threading.Lock()
        self._runs = runs
        self._leases = leases
        self._rows: dict[str, QueueRow] = {}
        self._limits: dict[str, QueueLimits] = {}
        self._workers: dict[str, WorkerRow] = {}

    def put_queued(self, row: QueueRow) -> None:
        with self.lock:
            self._rows.setdefault(row.run_id, row)

    def queued(self, run_id: str) -> QueueRow | None:
        with self.lock:
            return self._rows.get(run_id)

    def set_limits(self, limits: QueueLimits) -> None:
        with self.lock:
            self._limits[limits.name] = limits

    def limits(self) -> list[QueueLimits]:
        with self.lock:
            return sorted(self._limits.values(), key=lambda q: q.name)

    def claim_next(
        self, queues: Sequence[str], owner: str, until: float, now: float, skip: Sequence[str] = ()
    ) -> str | None:
        queued = {r.run_id for r in self._runs.runs("queued")}
        with self.lock:
            line = sorted(
                (r for r in self._rows.values() if r.run_id in queued and r.queue in queues),
                key=lambda r: (-r.priority, r.enqueued_at, r.run_id),
            )
            for row in line:  # the whole line: runs held back hide none behind them
                if row.run_id in skip:
                    continue
                held = self._leases.lease(row.run_id)
                if held is not None and held[1] >= now:
                    continue
                if self._held_back(row, now, fresh=True):
                    continue
                if self._leases.take_lease(row.run_id, owner, until, now) == owner:
                    self._rows[row.run_id] = msgspec.structs.replace(row, claimed_at=now)
                    return row.run_id
        return None

    def claim_run(self, run_id: str, owner: str, until: float, now: float, dead: str = "") -> bool:
        with self.lock:
            row = self._rows.get(run_id)
            if row is not None and self._held_back(row, now, fresh=False):
                return False
            return self._leases.take_lease(run_id, owner, until, now, dead) == owner

    def _held_back(self, row: QueueRow, now: float, *, fresh: bool) -> bool:
        limits = self._limits.get(row.queue)
        if limits is None:
            return False
        busy = [
            r
            for r in self._rows.values()
            if r.queue == row.queue
            and r.run_id != row.run_id
            and (held := self._leases.lease(r.run_id)) is not None
            and held[1] >= now
        ]
        if limits.concurrency is not None and len(busy) >= limits.concurrency:
            return True
        if limits.rate is not None and fresh:
            count, seconds = limits.rate
            started = [
                r
                for r in self._rows.values()
                if r.queue == row.queue
                and r.claimed_at is not None
                and r.claimed_at >= now - seconds
            ]
            if len(started) >= count:
                return True
        if limits.per_partition is not None and row.partition is not None:
            mine = [r for r in busy if r.partition == row.partition]
            return len(mine) >= limits.per_partition
        return False

    def beat_worker(self, row: WorkerRow) -> None:
        with self.lock:
            before = self._workers.get(row.id)
            if before is not None:
                row = msgspec.structs.replace(row, started_at=before.started_at)
            self._workers[row.id] = row

    def drop_worker(self, worker_id: str) -> None:
        with self.lock:
            self._workers.pop(worker_id, None)

    def workers(self, since: float, now: float) -> list[WorkerRow]:
        with self.lock:
            alive = [w for w in self._workers.values() if w.heartbeat_at >= since]
        held = self._leases.held_by(now)
        return [
            msgspec.structs.replace(w, runs=held.get(w.id, 0))
            for w in sorted(alive, key=lambda w: w.id)
        ]
