"""A worker: executes the runs of its queues, up to ``concurrency`` at once, and keeps
every run of the store moving without anyone typing ``recover``.

Each pass it enqueues the schedules' due ticks (one run per tick, ``NAME@<tick>``, see
:mod:`engine.runtime.schedules`), then (1) takes over runs whose owner died (lease
expired, or its process gone on this host; a queued run claimed by a worker that died
before starting it too), (2) resumes suspended runs that are due (timer passed, message
posted, child moved), then (3) claims queued runs, highest priority then oldest first,
as the queues' stored limits allow. Every take goes through the store's claim, so a
queue's limits hold across all workers and count a taken-over run once. Between passes
it sleeps until the earliest due time it saw (a timer, another owner's lease expiry, a
schedule's next tick), news of this process or an append to the store (LISTEN/NOTIFY
on PostgreSQL), whichever comes first.

``stop()`` drains: nothing more is claimed, each run stops before its next live call
(its finished calls recorded) and lets its lease go, so another worker continues it at
once; runs still busy after ``grace`` seconds have their leases released anyway (a
stale write of theirs is refused by the log's positions).
"""

from __future__ import annotations

import math
import os
import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol

from ... import observe
from ...errors import AgentlogError, RunBusy, UsageError
from ...kinds import SUSPENDED, RunStatus
from ...log.history import rebuild, started
from ...policy.failure import describe
from ...store import Store
from ...store.queueing import WorkerRow, check_queue
from ..host.keygate import KeyGate
from ..host.leases import HOST, Leases
from ..host.lockkeeper import Keeper
from ..schedules.firing import Enqueuing, Ticker
from ..waits import wakeups
from . import handles

if TYPE_CHECKING:
    from ..host.config import EngineConfig
    from ..host.signals import Signals
    from ..run.results import RunResult

PASS_GAP = 0.05  # the least time between two passes woken by appends (a busy store)
IDLE = 1.0  # the longest sleep between two passes
LOOK_AGAIN = 30.0  # seconds before a run this worker could not execute is looked at again


class WorkHost(Enqueuing, Protocol):
    """What a worker needs of its engine (and its schedules' ticker: enqueue)."""

    @property
    def store(self) -> Store: ...
    @property
    def config(self) -> EngineConfig: ...
    @property
    def signals(self) -> Signals: ...
    @property
    def leases(self) -> Leases: ...
    @property
    def keeper(self) -> Keeper: ...
    @property
    def key_gate(self) -> KeyGate: ...

    def work(self, run_id: str, dead: str = "") -> RunResult | None:
        """Execute the run whose lease this engine just took (start, resume or wake;
        ``dead``: the owner it was taken from)."""
        ...

    def runnable(self, run_id: str) -> bool:
        """Whether this engine can execute the run (its agent imports; not history)."""
        ...


class Worker:
    """``engine.worker(queues=("default",), concurrency=4, grace=30.0, version=None)``:
    ``run()`` blocks until ``stop()`` (from another thread or a signal handler) and
    returns whether the drain was clean; ``id`` is its owner id (as ``agentlog workers``
    lists it). With ``version``, it takes only runs whose agent recorded that version=."""

    def __init__(
        self,
        host: WorkHost,
        *,
        queues: tuple[str, ...] = ("default",),
        concurrency: int = 4,
        grace: float = 30.0,
        version: str | None = None,
    ) -> None:
        if isinstance(queues, str):
            queues = (queues,)
        self.queues = tuple(dict.fromkeys(check_queue(q) for q in queues))
        if not self.queues:
            raise UsageError("a worker serves at least one queue")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise UsageError(f"a worker's concurrency is a whole number >= 1: {concurrency!r}")
        if isinstance(grace, bool) or not isinstance(grace, int | float) or not grace >= 0:
            raise UsageError(f"a worker's grace is a number of seconds >= 0: {grace!r}")
        if version is not None and (not isinstance(version, str) or not version.strip()):
            raise UsageError(f"a worker's version is a non-empty string: {version!r}")
        self.version = version
        self._versions: dict[str, bool] = {}  # run id -> whether its version is ours
        self._host = host
        self.concurrency = concurrency
        self.grace = float(grace)
        self.id = host.leases.owner
        self._busy: dict[str, threading.Thread] = {}
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._now = threading.Event()  # a second stop: no grace
        self._idle = threading.Event()  # set while run() is not serving (before, after)
        self._idle.set()
        self._serving: threading.Thread | None = None  # the thread run() serves in
        # Runs this process could not execute (left to others), by when it looked: it looks
        # again after ``LOOK_AGAIN`` (a run adopted since, a store blip while loading).
        self._cannot: dict[str, float] = {}
        self._can: set[str] = set()  # runs it can (their agent imported once)
        self._started_at = host.config.wall()
        self._ticker = Ticker(host, host.config.wall)  # the schedules' due ticks
        self.passes = 0

    # --- running --------------------------------------------------------------------

    def run(self) -> bool:
        """Serve until ``stop()``; True if every run it held stopped within the grace."""
        host = self._host
        self._idle.clear()
        self._serving = threading.current_thread()
        try:
            if self._stopping.is_set():  # stopped before it began (its engine closed)
                return True
            return self._serve(host)
        finally:
            self._idle.set()

    def _serve(self, host: WorkHost) -> bool:
        host.key_gate.check(host.store, record=False)  # another key: refused before serving
        self._beat()
        host.keeper.every(("worker", self.id), host.leases.ttl / 3, self._beat)
        log = observe.get(worker=self.id)
        log.info("worker_started", queues=list(self.queues), concurrency=self.concurrency)
        try:
            while not self._stopping.is_set():
                after, seen = host.store.max_global_position(), host.signals.version
                due = self._pass()
                self._sleep(after, seen, due)
        finally:
            clean = self._drain()
            host.keeper.cancel(("worker", self.id), wait=True)
            try:
                host.store.queues.drop_worker(self.id)
            except Exception as e:  # its row ages out of `agentlog workers` by itself
                log.warning("worker_not_dropped", error=describe(e))
            log.info("worker_stopped", clean=clean)
        return clean

    def stop(self, now: bool = False) -> None:
        """Drain (claim nothing more; runs stop at their next call); ``now``: without
        waiting out the grace."""
        self._stopping.set()
        self._host.leases.draining = True  # from now: no run's call ends into another
        if now:
            self._now.set()
        self._host.signals.notify()

    def halt(self) -> None:
        """Its engine closes: a serving worker is stopped (it drains); one not serving
        never starts (nothing else of the engine is told to drain)."""
        self._stopping.set()
        if self._idle.is_set():
            self._host.signals.notify()
        else:
            self.stop()

    def join(self, timeout: float | None = None) -> bool:
        """Wait until ``run()`` returned (or never ran); False if ``timeout`` passed first
        (or this is the thread it serves in)."""
        if self._serving is threading.current_thread() and not self._idle.is_set():
            return False
        return self._idle.wait(timeout)

    def running(self) -> list[str]:
        """The runs this worker executes now."""
        with self._lock:
            return [rid for rid, t in self._busy.items() if t.is_alive()]

    def _free(self) -> int:
        with self._lock:
            self._busy = {rid: t for rid, t in self._busy.items() if t.is_alive()}
            return self.concurrency - len(self._busy)

    def _pass(self) -> float:
        """One pass: enqueue the schedules' due ticks, take over, wake, claim; the
        earliest due time seen (epoch seconds), a schedule's next tick included."""
        self.passes += 1
        host = self._host
        now = host.config.wall()
        due = now + IDLE
        try:
            wait = self._ticker.fire()  # first: a tick's run is claimed in this pass
            if wait is not None:
                due = min(due, host.config.wall() + wait)
            for run_id, holder, when in self._candidates(now):
                due = min(due, when)
                if math.isfinite(when) and when > now:
                    continue  # not due yet: only its time counts
                if self._free() <= 0 or self._stopping.is_set():
                    return due
                if host.store.queues.claim_run(run_id, self.id, now + host.leases.ttl, now, holder):
                    self._execute(run_id, holder)
            while self._free() > 0 and not self._stopping.is_set():
                claimed = self._claim_next(now)
                if claimed is None:
                    break
                self._execute(claimed)
        except Exception as e:  # a store blip: the next pass looks again
            observe.get(worker=self.id).warning("worker_pass_failed", error=describe(e))
            return now + IDLE
        return due

    def _claim_next(self, now: float) -> str | None:
        host = self._host
        while True:  # a run this process cannot execute is left in line for another
            found = host.store.queues.claim_next(
                self.queues,
                self.id,
                now + host.leases.ttl,
                now,
                skip=(
                    *(r for r in list(self._cannot) if self._left(r)),
                    *(r for r, ours in self._versions.items() if not ours),
                ),
            )
            if found is not None and not self._ours(found):  # left for a worker of its version
                host.store.drop_lease(found, self.id)
                continue
            if found is None or host.runnable(found):
                return found
            self._cannot[found] = time.monotonic()  # a worker that imports it takes it
            host.store.drop_lease(found, self.id)
            observe.get(run_id=found).info("worker_left_run", reason="agent not importable")

    def _candidates(self, now: float) -> Iterator[tuple[str, str, float]]:
        """Runs to take over or wake, each with the holder known dead ('' if none) and
        when it is due (now, a later time, or ``inf``: not by time)."""
        host, store = self._host, self._host.store
        for row in store.runs(RunStatus.RUNNING):
            if row.run_id in self._busy or not self._mine(row.run_id):
                continue
            holder = host.leases.dead_holder(store, row.run_id)
            if holder is not None:
                yield row.run_id, holder, now
            elif (lease := store.lease(row.run_id)) is not None:
                yield row.run_id, "", lease[1]  # look again when it would expire
        for row in store.runs(RunStatus.QUEUED):  # claimed by a worker that died before
            # starting it (unclaimed ones wait in line); another version's: never claimed
            if row.run_id in self._busy or not self._ours(row.run_id):
                continue
            holder = host.leases.dead_holder(store, row.run_id)
            if holder and self._mine(row.run_id):
                yield row.run_id, holder, now
        for status in sorted(SUSPENDED, reverse=True):  # waiting, then paused
            for row in store.runs(status):
                if row.run_id in self._busy or not self._mine(row.run_id):
                    continue
                state = rebuild(store, row.run_id)
                if wakeups.due(store, state, now):
                    yield row.run_id, "", now
                elif state.wake_at is not None and state.status == RunStatus.WAITING:
                    yield row.run_id, "", state.wake_at

    def _left(self, run_id: str) -> bool:
        """Whether ``run_id`` is one this worker could not execute a short while ago."""
        since = self._cannot.get(run_id)
        if since is None:
            return False
        if time.monotonic() - since < LOOK_AGAIN:
            return True
        del self._cannot[run_id]
        return False

    def _ours(self, run_id: str) -> bool:
        """Whether ``run_id``'s recorded version is this worker's (any, with none)."""
        if self.version is None:
            return True
        ours = self._versions.get(run_id)
        if ours is None:
            try:
                ours = started(self._host.store, run_id).version == self.version
            except AgentlogError:  # a log it cannot read (damaged, gone): not its to run
                ours = False
            self._versions[run_id] = ours
        return ours

    def _mine(self, run_id: str) -> bool:
        """Whether this worker looks after ``run_id``: a run of one of its queues, or of
        none (a child, a run started by ``engine.run``), that it can execute."""
        if self._left(run_id) or not self._ours(run_id):
            return False
        place = self._host.store.queues.queued(run_id)
        if place is not None and place.queue not in self.queues:
            return False
        if run_id in self._can:
            return True
        if not self._host.runnable(run_id):
            self._cannot[run_id] = time.monotonic()
            return False
        self._can.add(run_id)
        return True

    def _execute(self, run_id: str, dead: str = "") -> None:
        thread = threading.Thread(
            target=self._work, args=(run_id, dead), name=f"agentlog-work-{run_id[:8]}"
        )
        with self._lock:
            self._busy[run_id] = thread
        thread.start()

    def _work(self, run_id: str, dead: str) -> None:
        host = self._host
        try:
            host.work(run_id, dead)
        except RunBusy:
            pass  # another owner took it between our claim and the start
        except Exception as e:
            observe.get(run_id=run_id).error("run_not_started", error=describe(e))
            host.store.drop_lease(run_id, self.id)
        finally:
            host.signals.notify()  # a slot is free: the loop looks at once

    def _sleep(self, after: int, seen: int, due: float) -> None:
        """Until ``due`` (epoch seconds), news of this process, or an append after
        ``after`` (at least ``PASS_GAP`` apart when the store is busy)."""
        host = self._host
        time.sleep(PASS_GAP) if not self._stopping.is_set() else None
        left = min(due - host.config.wall(), IDLE)
        if left > 0 and not self._stopping.is_set():
            handles.wait_news(host.store, host.signals, seen, after, left)

    # --- stopping -------------------------------------------------------------------

    def _drain(self) -> bool:
        """Let the runs it executes stop at their next call, up to the grace; release
        the leases of those that did not (another worker takes them at once)."""
        leases = self._host.leases
        leases.draining = True
        try:
            end = time.monotonic() + self.grace
            for thread in list(self._busy.values()):
                while thread.is_alive() and not self._now.is_set():
                    left = end - time.monotonic()
                    if left <= 0:
                        break
                    thread.join(min(left, 0.1))
            stuck = self.running()
            for run_id in stuck:
                leases.stop(run_id, by=f"{self.id} (drained)")
                self._host.store.drop_lease(run_id, self.id)
            return not stuck
        finally:
            leases.draining = False

    def _beat(self) -> bool:
        host = self._host
        row = WorkerRow(
            self.id, HOST, os.getpid(), self.queues, self._started_at, host.config.wall()
        )
        try:
            host.store.queues.beat_worker(row)
        except Exception as e:  # a missed beat is retried at the next one
            observe.get(worker=self.id).warning("worker_heartbeat_failed", error=describe(e))
        return True
