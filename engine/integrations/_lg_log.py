"""LangGraph threads as runs of one store: a thread's run id, reading its stream into a
:class:`~engine.integrations._lg_thread.Thread`, and appending to it (no LangGraph import).

The threads a saver used last (``KEPT``) stay folded in memory; each read first folds
what other processes appended since (one read of the stream's tail), and an append that
finds its position taken folds the tail and tries again.
"""

from __future__ import annotations

import hashlib
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterator

from ..errors import ConcurrencyError
from ..events import AgentStarted, Event
from ..events.graphs import THREAD_AGENT
from ..kinds import RunStatus
from ..log.history import RUN_ID, run_stream
from ..store import Append, Snapshot, Store
from ..store.ports import RunRow
from ._lg_snap import due, load
from ._lg_thread import Thread

PREFIX = "lg:"  # a thread's run id: lg:<thread id>, or lg-<digest> for any other id
AGENT = THREAD_AGENT  # a thread's agent: langgraph:<the saver's name>
TRIES = 50  # appends raced by other writers of the same thread before giving up
KEPT = 256  # threads kept folded in memory; the least recently used one is read again


def thread_run_id(thread_id: str) -> str:
    """The run id of LangGraph thread ``thread_id`` (stable across processes)."""
    rid = PREFIX + thread_id
    if RUN_ID.fullmatch(rid):
        return rid
    return "lg-" + hashlib.sha256(thread_id.encode()).hexdigest()[:40]


class Threads:
    """The threads of ``store`` that one saver reads and writes, folded once each."""

    def __init__(
        self,
        store: Callable[[], Store],
        agent: str,
        snapshot: Callable[[Thread], Snapshot] | None = None,
    ) -> None:
        self._store = store
        self.agent = agent
        self._snapshot = snapshot  # a thread's snapshot (_lg_snap.take), kept every EVERY
        self.lock = threading.RLock()  # LangGraph writes a superstep's tasks from threads
        self._threads: OrderedDict[str, Thread] = OrderedDict()

    @property
    def store(self) -> Store:
        return self._store()

    def read(self, thread_id: str, *, full: bool = False) -> Thread:
        """The thread with every event appended so far folded in; a thread not folded
        yet starts from its newest snapshot (partial: only each namespace's newest
        checkpoint) unless ``full``, which folds the whole stream of a partial one."""
        with self.lock:
            stream = run_stream(thread_run_id(thread_id))
            thread = self._threads.get(thread_id)
            if thread is None and not full and self._snapshot is not None:
                thread = load(self.store, stream)
            if thread is None or (thread.partial and (full or thread.stale)):
                fresh = Thread()
                if thread is not None:  # this process's puts (never in the log), its snapshot
                    fresh.lists, fresh.snapped = thread.lists, thread.snapped
                    fresh.snap_bytes = thread.snap_bytes
                thread = fresh
            self._threads[thread_id] = thread
            self._threads.move_to_end(thread_id)
            if len(self._threads) > KEPT:
                self._threads.popitem(last=False)
            for r in self.store.read(stream, after=thread.position):
                thread.fold(r.position, r.event)
            if thread.stale:
                return self.read(thread_id, full=True)
            return thread

    def append(self, thread_id: str, make: Callable[[Thread], list[Event]]) -> Thread:
        """Append the events ``make`` builds from the thread as it stands (built again if
        another writer appended first); the first commit of a thread starts its run."""
        stream = run_stream(thread_run_id(thread_id))
        with self.lock:
            thread = self._threads.get(thread_id) or self.read(thread_id)
            if self._pruned(thread_id, stream, thread):
                thread = self.read(thread_id)
            self._threads.move_to_end(thread_id)
            for _ in range(TRIES):
                events = make(thread)
                if not events:
                    return thread
                if thread.position == 0:
                    events = [self._started(thread_id, events[0].at), *events]
                first = thread.position + 1
                items = [Append(stream, first + i, e) for i, e in enumerate(events)]
                try:
                    self.store.append(items, runs=[self._row(thread, thread_id, events)])
                except ConcurrencyError:
                    thread = self.read(thread_id)
                    continue
                for i, e in enumerate(events):
                    thread.fold(first + i, e)
                self._keep(stream, thread)
                return thread
            raise ConcurrencyError(f"thread {thread_id!r}: {TRIES} appends lost their place")

    def _pruned(self, thread_id: str, stream: uuid.UUID, thread: Thread) -> bool:
        """Whether a deleted thread (nothing left, a position) was pruned meanwhile: its
        rows are gone, so it starts again at position 1 (one read, after a delete only)."""
        if not thread.position or thread.checkpoints or thread.writes:
            return False
        if self.store.last_position(stream) >= thread.position:
            return False
        self._threads.pop(thread_id, None)
        return True

    def _keep(self, stream: uuid.UUID, thread: Thread) -> None:
        """Save a snapshot of ``thread`` once it grew enough since its last (_lg_snap)."""
        if self._snapshot is not None and due(thread):
            snapshot = self._snapshot(thread)
            self.store.save_snapshot(stream, snapshot)
            thread.snapped, thread.snap_bytes, thread.grown = (
                thread.position,
                len(snapshot.payload),
                0,
            )

    def _started(self, thread_id: str, at: float) -> AgentStarted:
        rid = thread_run_id(thread_id)
        return AgentStarted(
            at=at,
            agent=self.agent,
            import_path="langgraph",
            input={"thread_id": thread_id},
            run_id=rid,
        )

    def _row(self, thread: Thread, thread_id: str, events: list[Event]) -> RunRow:
        started = thread.started_at if thread.started_at is not None else events[0].at
        return RunRow(
            run_id=thread_run_id(thread_id),
            agent=self.agent,
            status=RunStatus.RUNNING,
            started_at=started,
            updated_at=events[-1].at,
            position=thread.position + len(events),
        )

    def thread_ids(self) -> Iterator[str]:
        """Every LangGraph thread of the store (of any saver's name)."""
        for row in self.store.runs():
            if not row.agent.startswith(AGENT):
                continue
            if row.run_id.startswith(PREFIX):
                yield row.run_id[len(PREFIX) :]
                continue
            first = self.store.read(run_stream(row.run_id), upto=1)
            if first and isinstance(first[0].event, AgentStarted):
                tid = first[0].event.input.get("thread_id")
                if isinstance(tid, str):
                    yield tid


__all__ = ["AGENT", "Threads", "thread_run_id"]
