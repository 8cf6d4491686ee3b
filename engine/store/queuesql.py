"""The queue tables in SQL, once for both backends: each backend gives its transaction
(with every claim of the store serialized), its parameter style and its table names.

The statements are written with ``?`` and ``{table}`` fields; a backend turns them into
its own (``%s`` and schema-qualified identifiers on PostgreSQL).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from typing import Any

import msgspec

from ..errors import CorruptData, UsageError
from .queueing import (
    CLAIM_SCAN,
    QueueLimits,
    QueueRow,
    QueueStore,
    WorkerRow,
    check_partition,
    check_priority,
    check_queue,
    limits_of,
)

DDL = (
    "CREATE TABLE IF NOT EXISTS {queue} (run_id TEXT PRIMARY KEY, queue TEXT NOT NULL, "
    "priority INTEGER NOT NULL, partition_key TEXT, enqueued_at {real} NOT NULL, "
    "claimed_at {real})",
    "CREATE INDEX IF NOT EXISTS agentlog_queue_line ON {queue} (queue, priority, enqueued_at)",
    "CREATE TABLE IF NOT EXISTS {limits} (name TEXT PRIMARY KEY, concurrency INTEGER, "
    "per_partition INTEGER, rate_count INTEGER, rate_seconds {real})",
    "CREATE TABLE IF NOT EXISTS {workers} (id TEXT PRIMARY KEY, host TEXT NOT NULL, "
    "pid INTEGER NOT NULL, queues TEXT NOT NULL, started_at {real} NOT NULL, "
    "heartbeat_at {real} NOT NULL)",
)
PUT = (
    "INSERT INTO {queue} (run_id, queue, priority, partition_key, enqueued_at) "
    "VALUES (?,?,?,?,?) ON CONFLICT (run_id) DO NOTHING"
)
GET = (
    "SELECT run_id, queue, priority, partition_key, enqueued_at, claimed_at FROM {queue} "
    "WHERE run_id = ?"
)
SET_LIMITS = (
    "INSERT INTO {limits} VALUES (?,?,?,?,?) ON CONFLICT (name) DO UPDATE SET "
    "concurrency = excluded.concurrency, per_partition = excluded.per_partition, "
    "rate_count = excluded.rate_count, rate_seconds = excluded.rate_seconds"
)
LIMITS = "SELECT name, concurrency, per_partition, rate_count, rate_seconds FROM {limits}"
# Queued runs nobody alive leases, first in line first.
LINE = (
    "SELECT q.run_id, q.queue, q.priority, q.partition_key FROM {queue} q "
    "JOIN {runs} r ON r.run_id = q.run_id LEFT JOIN {leases} l ON l.run_id = q.run_id "
    "WHERE r.status = 'queued' AND q.queue IN ({names}) AND (l.run_id IS NULL OR "
    "l.expires_at < ?) ORDER BY q.priority DESC, q.enqueued_at, q.run_id LIMIT {scan} OFFSET {at}"
)
# Runs of a queue (of one partition) executing now, but the one being claimed.
BUSY = (
    "SELECT count(*) FROM {queue} q JOIN {leases} l ON l.run_id = q.run_id "
    "WHERE q.queue = ? AND l.expires_at >= ? AND q.run_id <> ?"
)
BUSY_PARTITION = BUSY + " AND q.partition_key = ?"
STARTED = "SELECT count(*) FROM {queue} WHERE queue = ? AND claimed_at >= ?"
CLAIMED = "UPDATE {queue} SET claimed_at = ? WHERE run_id = ?"
OWNER = "SELECT owner FROM {leases} WHERE run_id = ?"
BEAT = (
    "INSERT INTO {workers} VALUES (?,?,?,?,?,?) ON CONFLICT (id) DO UPDATE SET "
    "heartbeat_at = excluded.heartbeat_at, queues = excluded.queues"
)
DROP_WORKER = "DELETE FROM {workers} WHERE id = ?"
WORKERS = (
    "SELECT w.id, w.host, w.pid, w.queues, w.started_at, w.heartbeat_at, (SELECT count(*) "
    "FROM {leases} l WHERE l.owner = w.id AND l.expires_at >= ?) FROM {workers} w "
    "WHERE w.heartbeat_at >= ? ORDER BY w.id"
)


def values(row: Any) -> tuple[Any, ...]:
    """A row as a tuple, whether the driver gives tuples, sqlite3 rows or dicts."""
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)


Cursor = Any
Statement = Callable[..., Any]  # (template, **fields) -> what the cursor executes


class SQLQueues(QueueStore):
    """The queue port on a SQL backend. ``claiming()`` is a write transaction that no
    other claim of the store runs beside; ``reading()`` a read-only one; ``sql(t)`` the
    backend's statement for template ``t``; ``take_lease`` the backend's lease upsert
    (parameters: run id, owner, until, now, dead)."""

    def __init__(
        self,
        *,
        claiming: Callable[[], AbstractContextManager[Cursor]],
        writing: Callable[[], AbstractContextManager[Cursor]],
        reading: Callable[[], AbstractContextManager[Cursor]],
        sql: Callable[..., Any],
        take_lease: Any,
    ) -> None:
        self._claiming = claiming
        self._writing = writing
        self._reading = reading
        self._sql = sql
        self._take_lease = take_lease

    def put_queued(self, row: QueueRow) -> None:
        with self._writing() as c:
            c.execute(
                self._sql(PUT),
                (row.run_id, row.queue, row.priority, row.partition, row.enqueued_at),
            )

    def queued(self, run_id: str) -> QueueRow | None:
        with self._reading() as c:
            c.execute(self._sql(GET), (run_id,))
            row = c.fetchone()
        return None if row is None else _place(values(row))

    def set_limits(self, limits: QueueLimits) -> None:
        count, seconds = limits.rate if limits.rate is not None else (None, None)
        params = (limits.name, limits.concurrency, limits.per_partition, count, seconds)
        with self._writing() as c:
            c.execute(self._sql(SET_LIMITS), params)

    def limits(self) -> list[QueueLimits]:
        with self._reading() as c:
            c.execute(self._sql(LIMITS))
            rows = [values(r) for r in c.fetchall()]
        return sorted((_limits(r) for r in rows), key=lambda q: q.name)

    def claim_next(
        self, queues: Sequence[str], owner: str, until: float, now: float, skip: Sequence[str] = ()
    ) -> str | None:
        names = ",".join("?" for _ in queues)
        full: set[object] = set()  # queues (or queue, partition) found at their limit
        passed = set(skip)
        if not self._waiting(names, queues, now, passed):
            return None  # an idle pass writes nothing: the claim's lock is for claims
        with self._claiming() as c:
            limits = self._limits_in(c)
            at = 0  # page on: runs held back or passed over hide none behind them
            while not all(q in full for q in queues):
                c.execute(self._sql(LINE, names=names, scan=CLAIM_SCAN, at=at), (*queues, now))
                line = [values(r) for r in c.fetchall()]
                for run_id, queue, _, partition in line:
                    if run_id in passed or queue in full or (queue, partition) in full:
                        continue
                    why = self._held_back(c, limits.get(queue), run_id, partition, now, fresh=True)
                    if why is not None:
                        full.add(queue if why == "queue" else (queue, partition))
                        continue
                    if self._take(c, run_id, owner, until, now, ""):
                        c.execute(self._sql(CLAIMED), (now, run_id))
                        return str(run_id)
                if len(line) < CLAIM_SCAN:
                    break
                at += CLAIM_SCAN
        return None

    def _waiting(self, names: str, queues: Sequence[str], now: float, passed: set[str]) -> bool:
        """Whether the line holds a run this claim might take, read without the claim's
        lock (a hint: a run queued after it is claimed on the next pass). On SQLite the
        claim's lock is the file's one write lock, which every idle worker pass took."""
        scan = len(passed) + 1
        with self._reading() as c:
            c.execute(self._sql(LINE, names=names, scan=scan, at=0), (*queues, now))
            return any(values(r)[0] not in passed for r in c.fetchall())

    def claim_run(self, run_id: str, owner: str, until: float, now: float, dead: str = "") -> bool:
        with self._claiming() as c:
            c.execute(self._sql(GET), (run_id,))
            found = c.fetchone()
            if found is not None:
                row = _place(values(found))
                limits = self._limits_in(c).get(row.queue)
                if self._held_back(c, limits, run_id, row.partition, now, fresh=False):
                    return False
            return self._take(c, run_id, owner, until, now, dead)

    def _limits_in(self, c: Cursor) -> dict[str, QueueLimits]:
        c.execute(self._sql(LIMITS))
        return {q.name: q for q in (_limits(values(r)) for r in c.fetchall())}

    def _held_back(
        self,
        c: Cursor,
        limits: QueueLimits | None,
        run_id: str,
        partition: str | None,
        now: float,
        *,
        fresh: bool,
    ) -> str | None:
        """Why the queue's limits hold ``run_id`` back now ("queue": the whole queue is
        at a limit; "partition": its partition is), or None."""
        if limits is None:
            return None
        busy = limits.concurrency
        if busy is not None and self._scalar(c, BUSY, (limits.name, now, run_id)) >= busy:
            return "queue"
        if limits.rate is not None and fresh:
            count, seconds = limits.rate
            if self._scalar(c, STARTED, (limits.name, now - seconds)) >= count:
                return "queue"
        if limits.per_partition is not None and partition is not None:
            params = (limits.name, now, run_id, partition)
            if self._scalar(c, BUSY_PARTITION, params) >= limits.per_partition:
                return "partition"
        return None

    def _scalar(self, c: Cursor, template: str, params: tuple[Any, ...]) -> int:
        c.execute(self._sql(template), params)
        return int(values(c.fetchone())[0])

    def _take(
        self, c: Cursor, run_id: str, owner: str, until: float, now: float, dead: str
    ) -> bool:
        c.execute(self._take_lease, (run_id, owner, until, now, dead))
        c.execute(self._sql(OWNER), (run_id,))
        return bool(values(c.fetchone())[0] == owner)

    def beat_worker(self, row: WorkerRow) -> None:
        queues = msgspec.json.encode(list(row.queues)).decode()
        params = (row.id, row.host, row.pid, queues, row.started_at, row.heartbeat_at)
        with self._writing() as c:
            c.execute(self._sql(BEAT), params)

    def drop_worker(self, worker_id: str) -> None:
        with self._writing() as c:
            c.execute(self._sql(DROP_WORKER), (worker_id,))

    def workers(self, since: float, now: float) -> list[WorkerRow]:
        with self._reading() as c:
            c.execute(self._sql(WORKERS), (now, since))
            rows = [values(r) for r in c.fetchall()]
        return list(_workers(rows))


def _damaged(table: str, e: Exception) -> CorruptData:
    return CorruptData(f"a row of {table} is damaged: {e}")


def _place(row: tuple[Any, ...]) -> QueueRow:
    """A stored place in line, its values checked (a forged row is refused)."""
    run_id, queue, priority, partition, enqueued, claimed = row
    try:
        place = QueueRow(
            str(run_id), check_queue(queue), check_priority(priority), check_partition(partition)
        )
        return msgspec.convert(
            {**msgspec.structs.asdict(place), "enqueued_at": enqueued, "claimed_at": claimed},
            QueueRow,
        )
    except (UsageError, msgspec.ValidationError) as e:
        raise _damaged("agentlog_queue", e) from None


def _workers(rows: list[tuple[Any, ...]]) -> Iterator[WorkerRow]:
    for wid, host, pid, queues, started, beat, runs in rows:
        try:
            names = tuple(msgspec.json.decode(queues, type=list[str]))
            yield WorkerRow(wid, host, int(pid), names, started, beat, int(runs))
        except (msgspec.DecodeError, msgspec.ValidationError, TypeError, ValueError) as e:
            raise _damaged("agentlog_workers", e) from None


def _limits(row: tuple[Any, ...]) -> QueueLimits:
    """A queue's stored limits, checked as ``engine.queue`` checks them: a forged row (a
    negative count, a NaN window, text) is refused, never obeyed."""
    name, concurrency, per_partition, count, seconds = row
    rate = None if count is None and seconds is None else (count, seconds)
    try:
        if rate is not None and isinstance(seconds, str):
            raise UsageError(f"a rate's seconds are a number, not {seconds!r:.40}")
        return limits_of(name, concurrency, per_partition, rate)
    except UsageError as e:
        raise _damaged("agentlog_queues", e) from None
