"""The keeper: one thread per engine renews what its runs hold while they execute (owner
leases, cross-agent locks), each on its own period. It starts with the first hold, ends
when nothing is held, and ``Engine.close`` stops and joins it.

Locks are renewed every third of their ttl while the block holding them runs. A process
that dies stops renewing, so its locks expire and others may take them. A renewal that
finds the hold gone (it expired and another run took the lock) is logged: the run's fence
is stale from then on, and the fencing service rejects its writes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass

from ... import observe
from ...store import Store

Renew = Callable[[], bool]  # one renewal; False: stop renewing (the hold is gone)


@dataclass
class _Job:
    period: float
    renew: Renew
    due: float  # monotonic time of the next renewal


class Keeper:
    """The renewals of one engine, by key, made in one thread (see the module)."""

    def __init__(self) -> None:
        self._jobs: dict[Hashable, _Job] = {}
        self._busy: Hashable | None = None  # the key being renewed now
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def every(self, key: Hashable, period: float, renew: Renew) -> None:
        """Call ``renew`` every ``period`` seconds (the first time a period from now)
        until :meth:`cancel` or until it returns False."""
        with self._changed:
            self._jobs[key] = _Job(period, renew, time.monotonic() + period)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._run, daemon=True, name="agentlog-keeper"
                )
                self._thread.start()
            self._changed.notify_all()

    def cancel(self, key: Hashable, wait: bool = False) -> None:
        """Stop renewing ``key``; with ``wait``, also wait out its renewal in flight (one
        that would write the hold back after it was let go)."""
        with self._changed:
            self._jobs.pop(key, None)
            while wait and self._busy == key and threading.current_thread() is not self._thread:
                self._changed.wait()

    def close(self) -> None:
        """Stop every renewal and join the thread (the next :meth:`every` starts another)."""
        with self._changed:
            self._jobs.clear()
            thread = self._thread
            self._changed.notify_all()
        if thread is not None and thread is not threading.current_thread():
            thread.join()

    def _next(self) -> tuple[Hashable, _Job] | None:
        """Wait for the next renewal due; None when nothing is held (the thread ends)."""
        with self._changed:
            self._busy = None
            self._changed.notify_all()
            while True:
                if not self._jobs:
                    self._thread = None
                    return None
                now = time.monotonic()
                key, job = min(self._jobs.items(), key=lambda kv: kv[1].due)
                if job.due <= now:
                    job.due, self._busy = now + job.period, key
                    return key, job
                self._changed.wait(job.due - now)

    def _run(self) -> None:
        while (found := self._next()) is not None:
            key, job = found
            try:
                kept = job.renew()
            except Exception as e:  # a renewal's own bug must not end every other one
                observe.get().warning("keeper_renewal_failed", key=str(key), error=str(e))
                kept = True  # tried again at its next period
            if not kept:
                with self._changed:
                    if self._jobs.get(key) is job:
                        del self._jobs[key]


@dataclass
class _Held:
    store: Store
    fence: int
    ttl: float


class LockKeeper:
    """The locks one engine's runs hold, by (run id, lock name), renewed by its keeper."""

    def __init__(self, keeper: Keeper) -> None:
        self._keeper = keeper
        self._held: dict[tuple[str, str], _Held] = {}
        self._lost: set[tuple[str, str]] = set()
        self._lock = threading.Lock()

    def holds(self, run_id: str, name: str) -> bool:
        """Whether a block of ``run_id`` in this engine holds ``name`` now."""
        with self._lock:
            return (run_id, name) in self._held

    def keep(self, store: Store, run_id: str, name: str, fence: int, ttl: float) -> None:
        """Renew the hold of ``name`` (``fence``) every ``ttl / 3`` until :meth:`drop`."""
        key, h = (run_id, name), _Held(store, fence, ttl)
        with self._lock:
            self._lost.discard(key)
            self._held[key] = h
        self._keeper.every(("lock", *key), ttl / 3, lambda: self._renew(run_id, name, h))

    def drop(self, run_id: str, name: str) -> bool:
        """Stop renewing ``name`` for ``run_id``; False if a renewal found it lost."""
        self._keeper.cancel(("lock", run_id, name))
        with self._lock:
            self._held.pop((run_id, name), None)
            lost = (run_id, name) in self._lost
            self._lost.discard((run_id, name))
            return not lost

    def drop_run(self, run_id: str) -> None:
        """Stop renewing every lock of ``run_id`` (its execution ended)."""
        with self._lock:
            keys = [k for k in self._held if k[0] == run_id]
            for key in keys:
                del self._held[key]
            self._lost = {k for k in self._lost if k[0] != run_id}
        for key in keys:
            self._keeper.cancel(("lock", *key))

    def _renew(self, run_id: str, name: str, h: _Held) -> bool:
        """One renewal of ``name``; False once the hold is gone (stop renewing it)."""
        log = observe.get(run_id=run_id)
        try:
            kept = h.store.locks.renew(name, run_id, h.fence, h.ttl)
        except Exception as e:  # a missed beat is retried at the next one
            log.warning("lock_heartbeat_failed", lock=name, error=str(e))
            return True
        if kept:
            return True
        with self._lock:
            if self._held.get((run_id, name)) is not h:
                return False  # dropped meanwhile (the block ended and released it)
            del self._held[(run_id, name)]
            self._lost.add((run_id, name))
        log.error("lock_lost", lock=name, fence=h.fence)
        return False
