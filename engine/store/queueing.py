"""Queues beside the log: which runs wait for a worker, the limits every worker obeys,
and the workers alive now (``store.queues``).

A queued run's truth is its log (``agent_started`` then ``run_queued``, status
``queued``); the ``agentlog_queue`` row is its place in line (queue, priority,
partition, when it was enqueued and first claimed), written before the log so a claim
never meets a run that has no row. A claim is one transaction serialized against every
other claim of the store (PostgreSQL: a transaction-scoped advisory lock; SQLite: the
file's write lock): it picks the first run the queue's limits allow and takes its lease
in the same commit, so limits count across every worker and a run counts once however
often it is taken over. A run "counts" while it holds a lease that has not expired.

Every name and limit is checked here (one clear ``UsageError``) before a backend sees
it, and backend errors are translated as the rest of the store translates them.
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager

import msgspec

from ..errors import UsageError

MAX_NAME = 200
MAX_PRIORITY = 2**31 - 1
CLAIM_SCAN = 200  # queued runs a claim reads at a time (it reads on past those held back)


class QueueRow(msgspec.Struct, frozen=True):
    """A run's place in line: its queue, priority (higher first), partition key (runs of
    one partition share ``per_partition``), when it was enqueued and first claimed."""

    run_id: str
    queue: str
    priority: int = 0
    partition: str | None = None
    enqueued_at: float = 0.0
    claimed_at: float | None = None


class QueueLimits(msgspec.Struct, frozen=True):
    """A queue's flow control, stored so every worker reads the same: at most
    ``concurrency`` of its runs executing at once across all workers, at most
    ``per_partition`` of one partition, at most ``rate[0]`` starts per ``rate[1]`` seconds
    (None: no such limit)."""

    name: str
    concurrency: int | None = None
    per_partition: int | None = None
    rate: tuple[int, float] | None = None


class WorkerRow(msgspec.Struct, frozen=True):
    """A worker as the store knows it: its owner id, host, pid, queues, when it started
    and last beat, and how many runs it holds (leases not expired)."""

    id: str
    host: str
    pid: int
    queues: tuple[str, ...]
    started_at: float
    heartbeat_at: float
    runs: int = 0


class QueueStore(ABC):
    """The queue tables of one backend."""

    @abstractmethod
    def put_queued(self, row: QueueRow) -> None:
        """Record ``row`` unless the run has one already (the first enqueue wins)."""

    @abstractmethod
    def queued(self, run_id: str) -> QueueRow | None:
        """The run's place in line, if it was enqueued."""

    @abstractmethod
    def set_limits(self, limits: QueueLimits) -> None:
        """Store (replace) a queue's limits."""

    @abstractmethod
    def limits(self) -> list[QueueLimits]:
        """Every queue's stored limits, by name."""

    @abstractmethod
    def claim_next(
        self, queues: Sequence[str], owner: str, until: float, now: float, skip: Sequence[str] = ()
    ) -> str | None:
        """Take the lease (for ``owner`` until ``until``) of the first run of ``queues``
        still queued and leased by nobody alive at ``now`` (priority, then oldest first)
        that its queue's limits allow, and mark it claimed; runs in ``skip`` are passed
        over. None if there is none."""

    @abstractmethod
    def claim_run(self, run_id: str, owner: str, until: float, now: float, dead: str = "") -> bool:
        """Take the lease of ``run_id`` (free, expired at ``now``, ``owner``'s or held
        by ``dead``) if its queue's concurrency limits allow one more (a run in no queue
        has none); whether ``owner`` holds it now."""

    @abstractmethod
    def beat_worker(self, row: WorkerRow) -> None:
        """Record (or renew) a live worker."""

    @abstractmethod
    def drop_worker(self, worker_id: str) -> None:
        """Forget a worker that stopped."""

    @abstractmethod
    def workers(self, since: float, now: float) -> list[WorkerRow]:
        """The workers that beat at ``since`` or later, with the runs each holds at
        ``now``, by id."""


def check_queue(name: object) -> str:
    """``name`` if it is a queue name: 1 to 200 printable characters."""
    if not isinstance(name, str) or not 1 <= len(name) <= MAX_NAME or not name.isprintable():
        raise UsageError(f"a queue name is 1 to {MAX_NAME} printable characters: {name!r:.60}")
    return name


def check_partition(key: object) -> str | None:
    """``key`` if it is a partition key (as a queue name) or None."""
    if key is None:
        return None
    if not isinstance(key, str) or not 1 <= len(key) <= MAX_NAME or not key.isprintable():
        raise UsageError(f"a partition key is 1 to {MAX_NAME} printable characters: {key!r:.60}")
    return key


def check_priority(priority: object) -> int:
    """``priority`` if it is an int within 32 bits (higher is claimed first)."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise UsageError(f"a priority is an int, not {type(priority).__name__}")
    if not -MAX_PRIORITY <= priority <= MAX_PRIORITY:
        raise UsageError(f"a priority is within ±{MAX_PRIORITY}, not {priority}")
    return priority


def _count(value: object, what: str) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_PRIORITY:
        raise UsageError(f"{what} is a positive int or None, not {value!r:.40}")
    return value


def limits_of(
    name: object, concurrency: object, per_partition: object, rate: object
) -> QueueLimits:
    """Checked limits for ``engine.queue``: counts are positive ints, ``rate`` is
    ``(count, seconds)`` with seconds finite and above 0."""
    window = None
    if rate is not None:
        if not isinstance(rate, tuple | list) or len(rate) != 2:
            raise UsageError(f"a queue's rate is (count, seconds), not {rate!r:.40}")
        count, seconds = rate
        if isinstance(seconds, bool) or not isinstance(seconds, int | float):
            raise UsageError(f"a rate's seconds are a number, not {seconds!r:.40}")
        if not (math.isfinite(seconds) and seconds > 0):
            raise UsageError(f"a rate's seconds are finite and above 0, not {seconds}")
        counted = _count(count, "a rate's count")
        assert counted is not None
        window = (counted, float(seconds))
    return QueueLimits(
        check_queue(name),
        _count(concurrency, "a queue's concurrency"),
        _count(per_partition, "a queue's per_partition"),
        window,
    )


class Queues:
    """``store.queues``: the backend's queue tables, its errors translated."""

    def __init__(
        self, port: QueueStore, translated: Callable[[], AbstractContextManager[None]]
    ) -> None:
        self._port = port
        self._translated = translated

    def put_queued(self, row: QueueRow) -> None:
        with self._translated():
            self._port.put_queued(row)

    def queued(self, run_id: str) -> QueueRow | None:
        with self._translated():
            return self._port.queued(run_id)

    def set_limits(self, limits: QueueLimits) -> None:
        with self._translated():
            self._port.set_limits(limits)

    def limits(self) -> list[QueueLimits]:
        with self._translated():
            return self._port.limits()

    def claim_next(
        self, queues: Sequence[str], owner: str, until: float, now: float, skip: Sequence[str] = ()
    ) -> str | None:
        names = [check_queue(q) for q in queues]
        with self._translated():
            return self._port.claim_next(names, owner, until, now, skip) if names else None

    def claim_run(self, run_id: str, owner: str, until: float, now: float, dead: str = "") -> bool:
        with self._translated():
            return self._port.claim_run(run_id, owner, until, now, dead)

    def beat_worker(self, row: WorkerRow) -> None:
        with self._translated():
            self._port.beat_worker(row)

    def drop_worker(self, worker_id: str) -> None:
        with self._translated():
            self._port.drop_worker(worker_id)

    def workers(self, since: float, now: float) -> list[WorkerRow]:
        with self._translated():
            return self._port.workers(since, now)


__all__ = [
    "QueueLimits",
    "QueueRow",
    "QueueStore",
    "Queues",
    "WorkerRow",
    "check_partition",
    "check_priority",
    "check_queue",
    "limits_of",
]
