"""Runs handed to workers: ``engine.enqueue`` records a run as queued and returns a
:class:`RunHandle` at once; ``engine.wait`` (and a handle's ``result``) blocks, from any
process, until the run is finished or waits for a person.

Waiting listens where the store can tell (PostgreSQL's LISTEN/NOTIFY, through
``wait_for_events``) and polls where it cannot (SQLite), and wakes at once for news of
this process (``host.signals``): no fixed sleep stands between a run's end and its waiter.
"""

from __future__ import annotations

import asyncio
import math
import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from ... import events as ev
from ...errors import ConcurrencyError, RunFailed, UsageError
from ...kinds import ASKING, SETTLED, RunStatus
from ...log.history import RunWriter, check_run_id, rebuild, run_stream
from ...log.state import RunState
from ...observe import Observers
from ...secrets import refuse_secret_input
from ...store import Store
from ...store.queueing import QueueRow, check_partition, check_priority, check_queue
from ..children.start import agent_started, origin
from ..defs.definitions import AgentDef, normalize
from ..host.signals import Signals
from ..run.repository import result_of

if TYPE_CHECKING:
    from ..host.config import EngineConfig
    from ..run.results import RunResult

LOOK = 1.0  # the longest wait between two looks at the run (news wakes it sooner)
# A run is done waiting for: finished, failed, or asking a person (paused, held).
DONE = SETTLED | ASKING


class QueueHost(Protocol):
    """What enqueueing and waiting need of an engine."""

    @property
    def store(self) -> Store: ...
    @property
    def signals(self) -> Signals: ...
    @property
    def config(self) -> EngineConfig: ...
    @property
    def observers(self) -> Observers: ...


def enqueue(
    host: QueueHost,
    agent: AgentDef,
    input: dict[str, Any],
    *,
    queue: str,
    priority: int,
    partition: str | None,
    run_id: str | None,
) -> RunHandle:
    """Record a new run of ``agent`` as queued (``agent_started`` and ``run_queued`` in
    one commit, after its place in line); an existing ``run_id`` is returned as it is."""
    rid = uuid.uuid4().hex if run_id is None else check_run_id(run_id)
    row = QueueRow(rid, check_queue(queue), check_priority(priority), check_partition(partition))
    store = host.store
    if run_id is not None and store.last_position(run_stream(rid)) > 0:
        return RunHandle(host, rid)  # enqueued (or run) before: that run, nothing new
    data = normalize(input, "the run's input")
    agent.check_input(data)
    refuse_secret_input(data, encrypted=store.encrypted)
    now = host.config.wall()
    # The row first: a claim joins it to the run's status, so a crash between the two
    # leaves a row no claim sees (the same enqueue again writes the run).
    store.queues.put_queued(QueueRow(rid, row.queue, row.priority, row.partition, now))
    started = agent_started(agent, data, now, run_id=rid)
    queued = ev.RunQueued(
        at=started.at, queue=row.queue, priority=row.priority, partition=row.partition
    )
    every = agent.snapshot_every
    writer = RunWriter(
        store, RunState(run_id=rid), snapshot_every=every, rpo=agent.rpo, wall=host.config.wall
    )
    try:
        writer.append(started, *origin(host.observers.context(), started.at), queued)
    except ConcurrencyError:
        if run_id is None:
            raise
    host.signals.notify()  # a worker of this process looks at once
    return RunHandle(host, rid)


def wait(host: QueueHost, run_id: str, timeout: float | None = None) -> RunResult:
    """The run's result once it is finished or waits for a person; TimeoutError past
    ``timeout`` seconds."""
    deadline = _deadline(timeout)
    store, signals = host.store, host.signals
    while True:
        seen, after = signals.version, store.max_global_position()
        state = rebuild(store, run_id)
        if state.status in DONE:
            return result_of(state)
        left = LOOK if deadline is None else min(LOOK, deadline - time.monotonic())
        if left <= 0:
            raise TimeoutError(f"run {run_id} is {state.status} after {timeout:g}s")
        wait_news(store, signals, seen, after, left)


def wait_news(store: Store, signals: Signals, seen: int, after: int, left: float) -> None:
    """Wait up to ``left`` seconds for news of this process or an append to the store."""
    step = min(left, 0.05)
    end = time.monotonic() + left
    while (remaining := end - time.monotonic()) > 0:
        if signals.wait(seen, min(step, remaining)) != seen:
            return
        if store.views.wait_for_events(after, min(step * 4, max(remaining, 0.0))):
            return
        step = min(step * 2, 0.25)


async def await_run(host: QueueHost, run_id: str, timeout: float | None = None) -> RunResult:
    """``wait`` on an event loop: the loop keeps running between two looks."""
    deadline = _deadline(timeout)
    pause = 0.01  # doubles while nothing is appended to the store, up to a quarter second
    store = host.store
    while True:
        after = store.max_global_position()
        state = rebuild(store, run_id)
        if state.status in DONE:
            return result_of(state)
        left = LOOK if deadline is None else deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"run {run_id} is {state.status} after {timeout:g}s")
        await asyncio.sleep(min(pause, left))  # the loop runs on meanwhile
        pause = 0.01 if store.max_global_position() != after else min(pause * 2, 0.25)


def _deadline(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or math.isnan(timeout):
        raise UsageError(f"a timeout is a number of seconds or None, not {timeout!r:.40}")
    return time.monotonic() + max(0.0, float(timeout))


def outcome(result: RunResult) -> Any:
    """A finished run's output; RunFailed for a run that failed or was abandoned."""
    if result.status == RunStatus.COMPLETED:
        return result.output
    raise RunFailed(result.run_id, str(result.status), result.error)


class RunHandle:
    """A run handed to workers: ``run_id``, ``status()``, ``result(timeout=None)`` (its
    output once it completes; RunFailed if it failed or was abandoned; TimeoutError past
    ``timeout``) and ``await handle.aresult()``."""

    def __init__(self, host: QueueHost, run_id: str) -> None:
        self._host = host
        self.run_id = run_id

    def status(self) -> str:
        """The run's status now, as its log says."""
        return str(rebuild(self._host.store, self.run_id).status)

    def result(self, timeout: float | None = None) -> Any:
        deadline = _deadline(timeout)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = wait(self._host, self.run_id, left)
            if done.status in SETTLED:
                return outcome(done)
            _pause_while_asking(self._host, self.run_id, deadline)

    async def aresult(self, timeout: float | None = None) -> Any:
        deadline = _deadline(timeout)
        while True:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            done = await await_run(self._host, self.run_id, left)
            if done.status in SETTLED:
                return outcome(done)
            await asyncio.sleep(LOOK)  # it asks a person: look again
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError(f"run {self.run_id} is {done.status} after {timeout:g}s")

    def __repr__(self) -> str:
        return f"RunHandle(run_id={self.run_id!r})"


def _pause_while_asking(host: QueueHost, run_id: str, deadline: float | None) -> None:
    """A paused run's result waits for the answer: one look's pause, or TimeoutError."""
    left = LOOK if deadline is None else min(LOOK, deadline - time.monotonic())
    if left <= 0:
        raise TimeoutError(f"run {run_id} waits for a person's answer")
    after = host.store.max_global_position()
    wait_news(host.store, host.signals, host.signals.version, after, left)
