"""The in-memory store: recorders on eventsourcing's public recorder classes, one lock each.

A real backend, not a mock: it passes eventsourcing's own recorder test cases and the
store contract. Each stream's positions are kept sorted, so a read bisects (a read after
a snapshot costs O(tail)) and rows come in position order whatever order they came in.
"""

from __future__ import annotations

import threading
from bisect import bisect_right, insort
from collections import defaultdict, deque
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    IntegrityError,
    Notification,
    StoredEvent,
    Subscription,
)

from .base import Store
from .memory_queues import MemoryQueues
from .memory_views import MemoryViews
from .ports import Fence, LeaseStore, LockRow, LockStore, RunRecorder, RunRow, lease_taken
from .schedules import MemorySchedules


class MemoryAggregateRecorder(AggregateRecorder):
    """Stored events in memory: the snapshots and blobs recorder, and the base of the
    events recorder."""

    def __init__(self) -> None:
        self.changed = threading.Condition(threading.RLock())
        # The rows in insertion order (a row's notification id is its index + 1) and, per
        # stream, position -> index. Named as in eventsourcing's POPO recorder, so test
        # helpers that plant a damaged row work on either.
        self._stored_events: list[StoredEvent] = []
        self._stored_events_index: defaultdict[str, dict[int, int]] = defaultdict(dict)
        self._positions: defaultdict[str, list[int]] = defaultdict(list)

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        with self.changed:
            self._insert(stored_events)
        return None

    def _insert(self, stored_events: Sequence[StoredEvent]) -> list[int]:
        """Insert all of ``stored_events`` or, if any position is taken, none."""
        new = {(str(s.originator_id), s.originator_version) for s in stored_events}
        if len(new) < len(stored_events):
            raise IntegrityError(f"stored events are not unique: {stored_events}")
        for key, position in new:
            if position in self._stored_events_index.get(key, ()):
                raise IntegrityError(f"position {position} of {key} is already recorded")
        ids = []
        for s in stored_events:
            key = str(s.originator_id)
            self._stored_events.append(s)
            self._stored_events_index[key][s.originator_version] = len(self._stored_events) - 1
            insort(self._positions[key], s.originator_version)
            ids.append(len(self._stored_events))
        self.changed.notify_all()
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
        with self.changed:
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


class MemoryEventRecorder(MemoryAggregateRecorder, RunRecorder):
    """The memory events recorder: a global order, and the run index updated under the
    same lock as the events it describes."""

    def __init__(self, leases: MemoryLeases | None = None) -> None:
        super().__init__()
        self._runs: dict[str, RunRow] = {}
        self._leases = leases  # the store's leases, which a fenced append checks

    def insert_events(
        self,
        stored_events: Sequence[StoredEvent],
        *,
        runs: Sequence[RunRow] = (),
        fence: Fence | None = None,
        **kwargs: Any,
    ) -> Sequence[int] | None:
        with self.changed:
            if fence is not None and self._leases is not None:
                with self._leases.lock:  # held to the insert: no lease moves in between
                    newer = self._leases.epoch(fence.run_id)
                    if newer > fence.epoch:
                        raise lease_taken(fence, newer)
                    ids = self._insert(stored_events)
            else:
                ids = self._insert(stored_events)
            for row in runs:
                self._runs.pop(row.run_id, None)
                self._runs[row.run_id] = row
        return ids

    def select_notifications(
        self,
        start: int | None,
        limit: int,
        stop: int | None = None,
        topics: Sequence[str] = (),
        *,
        inclusive_of_start: bool = True,
    ) -> Sequence[Notification]:
        first = 1 if start is None else max(1, start + (0 if inclusive_of_start else 1))
        found: list[Notification] = []
        with self.changed:
            last = len(self._stored_events) if stop is None else min(stop, len(self._stored_events))
            index = self._stored_events_index
            for i in range(first, last + 1):
                s = self._stored_events[i - 1]
                if topics and s.topic not in topics:
                    continue
                if index.get(str(s.originator_id), {}).get(s.originator_version) != i - 1:
                    continue  # pruned (engine.store.prune_rows): its slot stays, unread
                found.append(
                    Notification(
                        originator_id=s.originator_id,
                        originator_version=s.originator_version,
                        topic=s.topic,
                        state=s.state,
                        id=i,
                    )
                )
                if len(found) == limit:
                    break
        return found

    def max_notification_id(self) -> int | None:
        with self.changed:
            return len(self._stored_events) or None

    def stream_length(self, stream: UUID) -> int:
        with self.changed:
            return len(self._positions.get(str(stream), ()))

    def subscribe(
        self, gt: int | None = None, topics: Sequence[str] = ()
    ) -> Subscription[ApplicationRecorder]:
        return MemorySubscription(self, gt, topics)

    def runs(self, status: str | None = None) -> list[RunRow]:
        with self.changed:
            rows = [r for r in self._runs.values() if status is None or r.status == status]
        rows.sort(key=lambda r: (r.started_at, r.run_id), reverse=True)
        return rows

    def runs_started(self, low: float, high: float) -> list[RunRow]:
        with self.changed:
            return [r for r in self._runs.values() if low <= r.started_at <= high]

    def indexed_position(self, run_id: str) -> int | None:
        with self.changed:
            row = self._runs.get(run_id)
            return None if row is None else row.position

    def run_ids(self, prefix: str) -> list[str]:
        with self.changed:
            return sorted(k for k in self._runs if k.startswith(prefix))[:10]

    def children(self, parent_run_id: str) -> list[RunRow]:
        with self.changed:
            rows = [r for r in self._runs.values() if r.parent_run_id == parent_run_id]
        rows.sort(key=lambda r: (r.started_at, r.run_id))
        return rows


class MemorySubscription(Subscription[ApplicationRecorder]):
    """Notifications after ``gt`` as they are recorded; blocks until one comes or the
    subscription is stopped."""

    def __init__(self, recorder: MemoryEventRecorder, gt: int | None, topics: Sequence[str]):
        super().__init__(recorder=recorder, gt=gt, topics=topics)
        self.recorder = recorder
        self.after = gt or 0  # the last notification id looked at
        self.topics = tuple(topics)
        self.stopped = False
        self.pending: deque[Notification] = deque()

    def stop(self) -> None:
        super().stop()
        with self.recorder.changed:
            self.stopped = True
            self.recorder.changed.notify_all()

    def _newest(self) -> int:
        return self.recorder.max_notification_id() or 0

    def __next__(self) -> Notification:
        changed = self.recorder.changed
        while not self.pending:
            with changed:
                changed.wait_for(lambda: self.stopped or self._newest() > self.after)
                if self.stopped:
                    raise StopIteration
                newest = self._newest()
                found = self.recorder.select_notifications(
                    self.after, 500, topics=self.topics, inclusive_of_start=False
                )
                # With a topic filter, skip past rows that did not match.
                self.after = found[-1].id if len(found) == 500 else newest
                self.pending.extend(found)
        if self.stopped:
            raise StopIteration
        return self.pending.popleft()


class MemoryLeases(LeaseStore):
    """Owner leases in a dict under a lock: run -> (owner, expires_at, epoch); a dropped
    lease keeps its epoch with no owner ('')."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.held: dict[str, tuple[str, float, int]] = {}

    def take_lease_fenced(
        self, run_id: str, owner: str, until: float, now: float, dead: str = ""
    ) -> tuple[str, int]:
        with self.lock:
            held = self.held.get(run_id)
            if held is None:
                self.held[run_id] = (owner, until, 1)
            elif held[1] < now or held[0] in (owner, dead):
                self.held[run_id] = (owner, until, held[2] + (held[0] != owner))
            holder, _, epoch = self.held[run_id]
            return holder, epoch

    def epoch(self, run_id: str) -> int:
        """The run's lease epoch (0: never leased); the caller holds ``lock``."""
        return self.held.get(run_id, ("", 0.0, 0))[2]

    def drop_lease(self, run_id: str, owner: str) -> None:
        with self.lock:
            held = self.held.get(run_id)
            if held is not None and held[0] == owner:
                self.held[run_id] = ("", 0.0, held[2])

    def lease(self, run_id: str) -> tuple[str, float] | None:
        with self.lock:
            held = self.held.get(run_id)
            return (held[0], held[1]) if held is not None and held[0] else None

    def held_by(self, now: float) -> dict[str, int]:
        """How many leases each owner holds that have not expired at ``now``."""
        with self.lock:
            owners = [owner for owner, until, _ in self.held.values() if owner and until >= now]
        return {o: owners.count(o) for o in set(owners)}


class MemoryLocks(LockStore):
    """Cross-agent locks in a dict under a lock: name -> [holder, fence, expires_at]."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.rows: dict[str, tuple[str | None, int, float]] = {}

    def acquire(
        self, name: str, holder: str, until: float, now: float, keep_fence: int = 0
    ) -> int | None:
        with self.lock:
            row = self.rows.get(name)
            free = row is None or row[0] in (None, holder) or row[2] < now
            if keep_fence:  # still this holder's, or free since it was released
                if row is None or row[1] != keep_fence or row[0] not in (None, holder):
                    return None
                fence = keep_fence
            elif free:
                fence = 1 if row is None else row[1] + 1
            else:
                return None
            self.rows[name] = (holder, fence, until)
            return fence

    def renew(self, name: str, holder: str, fence: int, until: float) -> bool:
        with self.lock:
            if self.rows.get(name, (None, 0, 0.0))[:2] != (holder, fence):
                return False
            self.rows[name] = (holder, fence, until)
            return True

    def release(self, name: str, holder: str, fence: int) -> bool:
        with self.lock:
            row = self.rows.get(name)
            if row is None or row[:2] != (holder, fence):
                return False
            self.rows[name] = (None, fence, row[2])
            return True

    def release_all(self, holder: str) -> list[str]:
        with self.lock:
            names = sorted(n for n, row in self.rows.items() if row[0] == holder)
            for n in names:
                self.rows[n] = (None, *self.rows[n][1:])
            return names

    def held(self, now: float) -> list[LockRow]:
        with self.lock:
            return [
                LockRow(n, h, f, e)
                for n, (h, f, e) in sorted(self.rows.items())
                if h is not None and e >= now
            ]


def open_memory(name: str, **options: Any) -> Store:
    leases = MemoryLeases()
    events = MemoryEventRecorder(leases)
    return Store(
        name,
        events,
        MemoryAggregateRecorder(),
        MemoryAggregateRecorder(),
        leases,
        MemoryViews(events),
        locks=MemoryLocks(),
        queues=MemoryQueues(events, leases),
        schedules=MemorySchedules(),
        **options,
    )
