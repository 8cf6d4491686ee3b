"""LangGraph threads as runs of one store: a thread's run id, reading its stream into a
:class:`~engine.integrations._lg_thread.Thread`, and appending to it (no LangGraph import).

The threads a saver used last (``KEPT``) stay folded in memory; each read first folds
what other processes appended since (one read of the stream's tail), and an append that
finds its position taken folds the tail and tries again.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterator

from ..errors import ConcurrencyError
from ..events import AgentStarted, Event
from ..kinds import RunStatus
from ..log.history import RUN_ID, run_stream
from ..store import Append, Store
from ..store.ports import RunRow
from ._lg_thread import Thread

PREFIX = "lg:"  # a thread's run id: lg:<thread id>, or lg-<digest> for any other id
AGENT = "langgraph:"  # a thread's agent: langgraph:<the saver's name>
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

    def __init__(self, store: Callable[[], Store], agent: str) -> None:
        self._store = store
        self.agent = agent
        self.lock = threading.RLock()  # LangGraph writes a superstep's tasks from threads
        self._threads: OrderedDict[str, Thread] = OrderedDict()

    @property
    def store(self) -> Store:
        return self._store()

    def read(self, thread_id: str) -> Thread:
        """The thread with every event appended so far folded in."""
        with self.lock:
            thread = self._threads.get(thread_id)
            if thread is None:
                thread = self._threads[thread_id] = Thread()
                if len(self._threads) > KEPT:
                    self._threads.popitem(last=False)
            self._threads.move_to_end(thread_id)
            stream = run_stream(thread_run_id(thread_id))
            for r in self.store.read(stream, after=thread.position):
                thread.fold(r.position, r.event)
            return thread

    def append(self, thread_id: str, make: Callable[[Thread], list[Event]]) -> Thread:
        """Append the events ``make`` builds from the thread as it stands (built again if
        another writer appended first); the first commit of a thread starts its run."""
        stream = run_stream(thread_run_id(thread_id))
        with self.lock:
            thread = self._threads.get(thread_id) or self.read(thread_id)
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
                return thread
            raise ConcurrencyError(f"thread {thread_id!r}: {TRIES} appends lost their place")

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
