"""The heartbeat of cross-agent locks: one thread per engine renews every lock its runs
hold, each every third of its ttl, while the block holding it runs.

A process that dies stops renewing, so its locks expire and others may take them. A
renewal that finds the hold gone (it expired and another run took the lock) is logged:
the run's fence is stale from then on, and the fencing service rejects its writes.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass

from .. import observe
from ..store import Store


@dataclass
class _Held:
    store: Store
    fence: int
    ttl: float
    due: float  # monotonic time of the next renewal


class LockKeeper:
    """The locks one engine's runs hold, by (run id, lock name), and their heartbeat."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], _Held] = {}
        self._lost: set[tuple[str, str]] = set()
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def holds(self, run_id: str, name: str) -> bool:
        """Whether a block of ``run_id`` in this engine holds ``name`` now."""
        with self._changed:
            return (run_id, name) in self._held

    def keep(self, store: Store, run_id: str, name: str, fence: int, ttl: float) -> None:
        """Renew the hold of ``name`` (``fence``) every ``ttl / 3`` until :meth:`drop`."""
        with self._changed:
            self._lost.discard((run_id, name))
            self._held[(run_id, name)] = _Held(store, fence, ttl, time.monotonic() + ttl / 3)
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._beat, daemon=True, name="agentlog-lock-keeper"
                )
                self._thread.start()
            self._changed.notify_all()

    def drop(self, run_id: str, name: str) -> bool:
        """Stop renewing ``name`` for ``run_id``; False if a renewal found it lost."""
        with self._changed:
            self._held.pop((run_id, name), None)
            lost = (run_id, name) in self._lost
            self._lost.discard((run_id, name))
            return not lost

    def drop_run(self, run_id: str) -> None:
        """Stop renewing every lock of ``run_id`` (its execution ended)."""
        with self._changed:
            for key in [k for k in self._held if k[0] == run_id]:
                del self._held[key]
            self._lost = {k for k in self._lost if k[0] != run_id}

    def _due(self) -> list[tuple[tuple[str, str], _Held]] | None:
        """Wait for the next renewal; the holds due now, or None when nothing is held
        (the thread ends; the next :meth:`keep` starts another)."""
        with self._changed:
            while True:
                if not self._held:
                    self._thread = None
                    return None
                now = time.monotonic()
                due = [(k, h) for k, h in self._held.items() if h.due <= now]
                if due:
                    for _, h in due:
                        h.due = now + h.ttl / 3
                    return due
                self._changed.wait(min(h.due for h in self._held.values()) - now)

    def _beat(self) -> None:
        while (due := self._due()) is not None:
            for (run_id, name), h in due:
                self._renew(run_id, name, h)

    def _renew(self, run_id: str, name: str, h: _Held) -> None:
        log = observe.get(run_id=run_id)
        try:
            kept = h.store.locks.renew(name, run_id, h.fence, h.ttl)
        except Exception as e:  # a missed beat is retried at the next one
            log.warning("lock_heartbeat_failed", lock=name, error=str(e))
            return
        if kept:
            return
        with self._changed:
            if self._held.get((run_id, name)) is not h:
                return  # dropped meanwhile (the block ended and released it)
            del self._held[(run_id, name)]
            self._lost.add((run_id, name))
        log.error("lock_lost", lock=name, fence=h.fence)
