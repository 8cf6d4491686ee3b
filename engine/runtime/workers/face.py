"""The Engine's methods for work handed to workers: enqueue, wait, send from outside a
run, queue limits, workers (an Engine mixin, as the decorators are)."""

from __future__ import annotations

import asyncio
import functools
import time
import weakref
from typing import TYPE_CHECKING, Any

from ...errors import UsageError
from ...kinds import LIVE, SUSPENDED
from ...log.history import rebuild
from ...store.queueing import QueueLimits, WorkerRow, limits_of
from ..lifecycle import driver
from ..run.context import current
from ..waits import mailbox
from . import handles
from .worker import Worker

if TYPE_CHECKING:
    from collections.abc import Callable

    from ...observe import Observers
    from ...store import Store
    from ..defs.definitions import AgentDef
    from ..defs.registry import Registry
    from ..host.config import EngineConfig
    from ..host.keygate import KeyGate
    from ..host.leases import Leases
    from ..host.lockkeeper import Keeper
    from ..host.signals import Signals
    from ..lifecycle.driver import Driver
    from ..run.repository import RunRepository
    from ..run.results import RunResult

# A worker whose last beat is older than this many leases is not listed as live.
LISTED_FOR = 3.0


class Working:
    """``engine.enqueue`` / ``wait`` / ``send`` / ``queue`` / ``worker`` / ``workers``."""

    if TYPE_CHECKING:  # what the Engine gives it

        @property
        def store(self) -> Store: ...

        config: EngineConfig
        registry: Registry
        leases: Leases
        keeper: Keeper
        key_gate: KeyGate
        observers: Observers

        @property
        def signals(self) -> Signals: ...
        def resolve(self, run_id: str) -> str: ...
        def wake(self, run_id: str) -> None: ...

        @property
        def _runs(self) -> RunRepository: ...
        @property
        def _driver(self) -> Driver: ...

        def _due(self, run_id: str) -> bool: ...
        def _after(self, result: RunResult) -> RunResult: ...

    def enqueue(
        self,
        agent: AgentDef | Callable[..., Any],
        /,
        *,
        queue: str = "default",
        priority: int = 0,
        partition: str | None = None,
        run_id: str | None = None,
        **input: Any,
    ) -> handles.RunHandle:
        """Record a run of ``agent`` as queued for a worker and return its handle at
        once; the same ``run_id`` again returns that run and starts nothing."""
        if current() is not None:
            raise UsageError("engine.enqueue inside a run: start a child with run.spawn")
        from ..defs.definitions import AgentDef

        a = agent if isinstance(agent, AgentDef) else self.agent(agent)  # type: ignore[attr-defined]
        return handles.enqueue(
            self, a, input, queue=queue, priority=priority, partition=partition, run_id=run_id
        )

    async def aenqueue(
        self, agent: AgentDef | Callable[..., Any], /, **kwargs: Any
    ) -> handles.RunHandle:
        """``enqueue`` from an event loop (one commit, in a thread of the loop's pool)."""
        if current() is not None:  # decided here, on the loop: the pool's thread sees no run
            raise UsageError("engine.aenqueue inside a run: start a child with run.spawn")
        return await asyncio.get_running_loop().run_in_executor(
            None, lambda: self.enqueue(agent, **kwargs)
        )

    def handle(self, run_id: str) -> handles.RunHandle:
        """The handle of the run ``run_id`` (an id or a unique prefix)."""
        return handles.RunHandle(self, self.resolve(run_id))

    def wait(self, run_id: str, timeout: float | None = None) -> RunResult:
        """Block until the run is finished or waits for a person: its result
        (TimeoutError past ``timeout`` seconds)."""
        return handles.wait(self, self.resolve(run_id), timeout)

    async def await_run(self, run_id: str, timeout: float | None = None) -> RunResult:
        """``wait`` on an event loop, without blocking it."""
        return await handles.await_run(self, self.resolve(run_id), timeout)

    def send(self, run_id: str, topic: str, value: Any = None) -> None:
        """From outside any run (a webhook, a script): post ``value`` on ``topic`` to the
        run, delivered once to its ``run.recv(topic)``, and wake it (here if this
        engine defines its agent; else the workers do)."""
        if current() is not None:
            raise UsageError("engine.send inside a run: use run.send, which is durable")
        rid = self.resolve(run_id)
        mailbox.post(self.store, rid, topic, value, self.config.wall())
        self.signals.notify()
        if self.registry.agent(rebuild(self.store, rid).agent) is not None:
            self.wake(rid)

    def queue(
        self,
        name: str,
        *,
        concurrency: int | None = None,
        per_partition: int | None = None,
        rate: tuple[int, float] | None = None,
    ) -> QueueLimits:
        """Declare a queue's limits, stored so every worker obeys the same: at most
        ``concurrency`` runs of it at once across all workers, ``per_partition`` of one
        partition, ``rate=(count, seconds)`` starts per window (None: no limit)."""
        limits = limits_of(name, concurrency, per_partition, rate)
        self.store.queues.set_limits(limits)
        return limits

    def worker(
        self,
        queues: tuple[str, ...] = ("default",),
        concurrency: int = 4,
        grace: float = 30.0,
        version: str | None = None,
    ) -> Worker:
        """A worker of this engine (``.run()`` blocks until ``.stop()``; closing the
        engine stops it and waits for its ``run()`` to return); with ``version``, it takes
        only runs whose agent recorded that ``version=``."""
        made = Worker(
            self, queues=tuple(queues), concurrency=concurrency, grace=grace, version=version
        )
        self._workers_made.add(made)
        return made

    @functools.cached_property
    def _workers_made(self) -> weakref.WeakSet[Worker]:
        return weakref.WeakSet()

    def _stop_workers(self, patience: float) -> None:
        """Stop this engine's workers and wait (``patience`` seconds at most) for their
        loops to end: one still serving would use the store after it closed."""
        workers = list(self._workers_made)
        for w in workers:
            w.halt()
        deadline = time.monotonic() + patience
        for w in workers:
            w.join(max(0.0, deadline - time.monotonic()))

    def workers(self) -> list[WorkerRow]:
        """The workers alive now (a beat within the last few leases), by id."""
        now = self.config.wall()
        return self.store.queues.workers(now - LISTED_FOR * self.leases.ttl, now)

    def work(self, run_id: str, dead: str = "") -> RunResult | None:
        """Execute ``run_id``, whose lease a worker of this engine just claimed: start it
        (queued), resume it (its owner ``dead`` died: held instead if its agent resumes
        on approval) or wake it (suspended and due; None if no longer due)."""
        with self.leases.hold(self.store, run_id):
            status = rebuild(self.store, run_id).status
            if status in SUSPENDED:
                if not self._due(run_id):
                    return None
                result = driver.resume(self._runs, self._driver, run_id)
            elif status in LIVE:  # queued (a start), or running (its owner died)
                result = driver.start(self._runs, self._driver, run_id, owner=dead)
            else:
                return None
        return self._after(result)

    def runnable(self, run_id: str) -> bool:
        """Whether this engine can execute ``run_id``: its agent imports here, and it is
        not an imported run nobody adopted."""
        try:
            self._runs.load(run_id, "be executed").agent  # noqa: B018
        except Exception:
            return False
        return True
