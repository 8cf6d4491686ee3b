"""The Engine: decorators that register tools and agents, and the runs it drives.

Opening an engine touches no store until first use, so whoever *runs* an agent (a
script, the CLI with ``--url``) decides where the run is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import functools
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from .. import observe
from ..errors import AgentlogError, ReplayKeyDiffers, RunBusy, UsageError
from ..kinds import SUSPENDED, Effects, RunStatus
from ..log.history import RunWriter, check_run_id, rebuild, run_stream
from ..log.state import RunState
from ..policy.failure import describe
from ..secrets import refuse_secret_input
from ..stats import span_seconds
from ..store import Store, cipher_configured
from .call import forks
from .children import spawn as children
from .children.start import agent_started, origin
from .declare.decorators import Declaring
from .defs.definitions import AgentDef, normalize
from .defs.registry import Registry
from .host.config import EngineConfig
from .host.guards import Guards
from .host.keygate import KeyGate
from .host.leases import Leases, new_owner
from .host.lockkeeper import Keeper, LockKeeper
from .host.signals import Signals
from .journal.recorded import Journal
from .lifecycle import approval
from .lifecycle.answer import answer as answer_run
from .lifecycle.driver import Driver
from .lifecycle.driver import resume as resume_run
from .lifecycle.driver import start as start_run
from .lifecycle.driver import verify as verify_run
from .lifecycle.rewind import Edits
from .lifecycle.rewind import rewind as rewind_run
from .lifecycle.verifying import verify_all
from .retention.pruning import Retention
from .run import adoption
from .run.catalog import Catalog
from .run.context import current
from .run.repository import RunRepository
from .run.results import RunResult
from .schedules.scheduling import Scheduling
from .undo.saga import abandon as abandon_run
from .waits import locks, wakeups
from .workers.face import Working

P = ParamSpec("P")
R = TypeVar("R")

# Threads an engine's async durable calls may use at once (asyncio's default pool is
# min(32, cpus + 4) per event loop, and each run of an async agent has its own loop).
POOL_THREADS = 256
# How long ``close`` waits for the runs an engine executes in the background to stop.
CLOSE_PATIENCE = 60.0


class Engine(Catalog, Declaring, Working, Scheduling, Retention):
    """Registers tools and agents; runs, resumes, rewinds and inspects runs in one store.

    Everything an engine uses is its own, given or made when it is built: its settings
    (``config``), guards, leases, the registry of the tools and agents it defined, and the
    thread pool its async durable calls run in (shut down by ``close``)."""

    def __init__(
        self,
        url: str | None = None,
        store: Store | None = None,
        *,
        create: bool = True,
        config: EngineConfig | None = None,
    ) -> None:
        super().__init__(url, store, create=create)
        self.config = config = EngineConfig() if config is None else config
        self._closing = threading.Lock()
        self.owner = new_owner()
        self.guards = Guards.of(config)
        self.keeper = Keeper()  # the one thread renewing its leases and locks
        self.key_gate = KeyGate()  # its replay key is the store's (checked once per store)
        self.leases = Leases(
            self.owner,
            self.keeper,
            ttl=config.lease_ttl,
            wall=config.wall,
            gate=self.key_gate.check,
        )
        self.registry = Registry()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()
        self._background: set[threading.Thread] = set()  # runs it executes on its own
        self._signals = Signals()
        self.lock_keeper = LockKeeper(self.keeper)  # the cross-agent locks its runs hold
        self.observers = observe.Observers()  # who watches its runs' executions (traces)

    @property
    def signals(self) -> Signals:
        """News, within this process, that runs changed (waiters wake at once)."""
        return self._signals

    @classmethod
    def open(
        cls,
        url: str | None = None,
        *,
        config: EngineConfig | None = None,
        key_ttl: float | str | None = None,
    ) -> Engine:
        """An engine on ``url`` (default ``$AGENTLOG_URL``, else ``sqlite:///./agentlog.db``);
        ``key_ttl`` (``"7d"``, seconds) expires business keys that long after their last use."""
        if key_ttl is not None:
            ttl = span_seconds(key_ttl, "key_ttl")
            config = dataclasses.replace(config or EngineConfig(), key_ttl=ttl)
        return cls(url, config=config)

    @contextlib.contextmanager
    def kept_open(self, store: Store) -> Iterator[bool]:
        """Whether ``store`` is this engine's open store; ``close`` waits until the block
        ends (a thread outliving its run, such as a late tool result, writes safely)."""
        with self._closing:
            yield self._store is store

    def executor(self) -> Executor:
        """The thread pool async durable calls run in: created on first use, shut down by
        ``close``. Each call holds a thread while its tool runs, so the pool is wide
        (``POOL_THREADS``; a thread is started only when all are busy) and concurrent
        runs do not queue behind each other's calls."""
        with self._pool_lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(POOL_THREADS, thread_name_prefix="agentlog-call")
            return self._pool

    def close(self) -> None:
        """Close the store, shut the thread pool down and stop (and join) the keeper
        thread, once the runs it executes in the background stopped (children, wakes:
        ``CLOSE_PATIENCE`` at most); a thread still busy (a tool abandoned at its
        timeout) is not waited for. Its workers are stopped and their loops waited for
        (as long). The engine may be used again."""
        self._stop_workers(CLOSE_PATIENCE)
        self._let_background_runs_stop()
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        self.keeper.close()
        with self._closing:
            super().close()

    # --- running ---------------------------------------------------------------------

    @functools.cached_property
    def _runs(self) -> RunRepository:
        """How this engine finds, leases and loads runs."""
        return RunRepository(self, self.leases, self.registry, self.config.clock, self.config.wall)

    @functools.cached_property
    def _driver(self) -> Driver:
        """How this engine executes agents."""
        return Driver(self)

    def run(
        self, agent: AgentDef | Callable[..., Any], /, *, run_id: str | None = None, **input: Any
    ) -> RunResult:
        """Start ``agent`` with ``input`` as a new run (or, for an existing ``run_id``,
        continue it: a run id never runs twice)."""
        if current() is not None:
            raise UsageError(
                "engine.run inside a run: start a child run with run.spawn(agent, ...) "
                "(or run.call(agent, ...) to wait for its output)"
            )
        a = agent if isinstance(agent, AgentDef) else self.agent(agent)
        rid = uuid.uuid4().hex if run_id is None else check_run_id(run_id)
        data = normalize(input, "the run's input")
        a.check_input(data)
        refuse_secret_input(data, encrypted=cipher_configured(self.url))
        with self.leases.hold(self.store, rid):
            if run_id is not None and self.store.last_position(run_stream(rid)) > 0:
                return self.resume(rid)
            writer = RunWriter(
                self.store,
                RunState(run_id=rid),
                snapshot_every=a.snapshot_every,
                fence=self.leases.fence(rid),
                rpo=a.rpo,
                clock=self.config.clock,
                wall=self.config.wall,
            )
            started = agent_started(a, data, self.config.wall(), run_id=rid)
            writer.append(started, *origin(self.observers.context(), started.at))
            result = self._driver.drive(a, writer, Journal(), data, check=started.key_check)
        return self._after(result)

    async def arun(self, agent: AgentDef | Callable[..., Any], /, **input: Any) -> RunResult:
        """``run`` from inside an event loop (the run executes in a worker thread)."""
        return await asyncio.to_thread(self.run, agent, **input)

    def resume(self, run_id: str) -> RunResult:
        """Continue a crashed, failed, waiting or answered run from its log; a held run's
        resume (a person asked for it) is recorded as its approval."""
        rid = self._runs.resolve(run_id)
        if rebuild(self.store, rid).status == RunStatus.HELD:
            return self.approve(rid, via="resume")
        return self._after(resume_run(self._runs, self._driver, rid))

    def approve(self, run_id: str, *, via: str = "approve") -> RunResult:
        """Let a held run (crashed; its agent has ``resume="approve"``) continue: the
        approval (who, when) is recorded, then the run resumes. UsageError if not held."""
        return self._after(approval.approve(self._runs, self._driver, run_id, via))

    def start(self, run_id: str) -> None:
        """Execute the recorded run ``run_id`` (a child just spawned, or one whose owner
        died) in a thread of its own; a run a live owner holds is left to it. Not a
        daemon thread: a process that ends (a script, the CLI once a parent paused)
        waits for the runs it still executes to stop (finish, pause or wait), instead
        of cutting a side effect in half."""
        self._in_background(run_id, only_if_due=False, name=f"agentlog-run-{run_id[:8]}")

    def wake(self, run_id: str) -> None:
        """Resume the waiting run ``run_id`` in a thread of its own (as ``start``), if
        it is due."""
        self._in_background(run_id, only_if_due=True, name=f"agentlog-wake-{run_id[:8]}")

    def _in_background(self, run_id: str, *, only_if_due: bool, name: str) -> None:
        thread = threading.Thread(target=self._executed, args=(run_id, only_if_due), name=name)
        with self._pool_lock:
            self._background.add(thread)
        thread.start()

    def _let_background_runs_stop(self) -> None:
        """Wait (``CLOSE_PATIENCE`` seconds at most) for the runs this engine executes in
        the background to stop: closing the store under one would cut its work short."""
        deadline = time.monotonic() + CLOSE_PATIENCE
        me = threading.current_thread()
        while (left := deadline - time.monotonic()) > 0:
            with self._pool_lock:
                busy = [t for t in self._background if t is not me]
            if not busy:
                return
            busy[0].join(left)

    def _executed(self, run_id: str, only_if_due: bool) -> None:
        """Execute ``run_id`` in this (background) thread; what stops it is logged."""
        try:
            now = self.config.wall()
            if only_if_due and not wakeups.due(self.store, self.state(run_id), now):
                return
            queues = self.store.queues
            if queues.queued(run_id) is not None and not queues.claim_run(
                run_id, self.owner, now + self.leases.ttl, now
            ):
                return  # its queue is at a limit: a worker takes it when a slot frees
            self._after(start_run(self._runs, self._driver, run_id))
        except RunBusy:
            return  # a live owner executes it
        except Exception as e:
            observe.get(run_id=run_id).error("run_not_started", error=describe(e))
        finally:
            with self._pool_lock:
                self._background.discard(threading.current_thread())

    def _after(self, result: RunResult) -> RunResult:
        """A run's execution ended (``result``): tell this process's waiters, and continue
        the parent that waits on it."""
        self._signals.notify()
        locks.after_run(self, self.store, result)  # a run that ended frees its locks
        forks.after_run(self.store, result)  # before its parent goes on: warned by then
        children.after_run(self, self.store, result)
        wakeups.after_run(self, self.store, result)
        return result

    def recover(self) -> list[RunResult]:
        """Resume every run whose owner died (lease expired, or its process is gone), and
        every waiting or paused run that is due: its timer or receive deadline passed, a
        message it waits for was posted, or the child it waits on moved. A run not due
        is left alone (nothing is written).

        A run that cannot be resumed (a damaged log, changed code, an agent that no longer
        imports, an unexpected error) does not stop the others: its result keeps the run's
        status, says why in ``error`` and sets ``not_resumed`` ("refused" or "unexpected").
        An imported run nobody adopted is skipped: it has no owner, and it is not code.
        An engine whose replay key is not the store's raises ``ReplayKeyDiffers`` instead.
        """
        self.key_gate.check(self.store, record=False)  # refused even with nothing due
        results: list[RunResult] = []
        for row in self.store.runs(RunStatus.RUNNING):
            dead = self.leases.dead_holder(self.store, row.run_id)
            if dead is not None:
                self._recovered(row.run_id, functools.partial(self._crashed, owner=dead), results)
        for status in sorted(SUSPENDED - {RunStatus.HELD}, reverse=True):  # waiting, paused
            for row in self.store.runs(status):
                self._recovered(row.run_id, self._resumed_due, results)
        return results

    def _recovered(
        self, run_id: str, how: Callable[[str], RunResult | None], results: list[RunResult]
    ) -> None:
        """Recover ``run_id`` by ``how``; its result (if it ran) or why it could not."""
        try:
            result = how(run_id)
        except RunBusy:
            return  # a live owner (another recoverer) took it first
        except ReplayKeyDiffers:
            raise  # this engine executes nothing on this store: no run is worth trying
        except Exception as e:
            why = "refused" if isinstance(e, AgentlogError) else "unexpected"
            message = f"not resumed: {describe(e)}"
            observe.get(run_id=run_id).error("recover_skipped_run", reason=why, error=message)
            status = RunStatus.RUNNING
            with contextlib.suppress(Exception):
                status = rebuild(self.store, run_id).status
            result = RunResult(run_id, status, error=message, not_resumed=why)
        if result is not None:
            results.append(result)

    def _crashed(self, run_id: str, owner: str) -> RunResult | None:
        """Resume the running run whose owner died (not an imported one), or hold it for
        approval (``lifecycle.approval``: its agent has ``resume="approve"``)."""
        if adoption.imported(self.store, run_id):
            return None
        return self._after(approval.recover_crashed(self._runs, self._driver, run_id, owner))

    def _resumed_due(self, run_id: str) -> RunResult | None:
        """Resume the waiting or paused run ``run_id`` if it is due: looked at, then looked
        at again holding its lease (another recoverer may have just resumed it)."""
        if not self._due(run_id):
            return None
        with self.leases.hold(self.store, run_id):
            if not self._due(run_id):
                return None
            result = resume_run(self._runs, self._driver, run_id)
        return self._after(result)

    def _due(self, run_id: str) -> bool:
        state = rebuild(self.store, run_id)
        if state.imported or state.status not in SUSPENDED:
            return False
        return wakeups.due(self.store, state, self.config.wall())

    def answer(self, run_id: str, value: Any) -> RunResult:
        """Answer the question a paused run waits on, and continue it."""
        return self._after(answer_run(self._runs, self._driver, run_id, value))

    def abandon(self, run_id: str) -> RunResult:
        """Stop a run for good, running its compensations in reverse order."""
        return self._after(abandon_run(self._runs, run_id))

    def rewind(
        self,
        run_id: str,
        to: int | str | None = None,
        effects: str = Effects.REUSE,
        set: Mapping[str, Any] | None = None,
        answer: Any = None,
        dry_run: bool = False,
        by: str | None = None,
    ) -> RunResult:
        """Fork a new run from a checkpoint name or position of ``run_id`` and continue it.

        The parent's side effects after ``to``: ``"reuse"`` records the parent's outcome
        when the fork makes the same call (nothing is sent), ``"compensate"`` undoes them
        first (recorded in the parent), ``"resend"`` sends them again under the fork's keys.
        ``set`` replaces inherited values by name (a decision, a question's answer, a
        read-only tool's result), ``answer`` answers the question the fork starts at (by
        default the parent's last), ``dry_run`` sends no side effect (docs/guides/forks.md);
        ``fork_edited`` records the edits and ``by`` whom (default: user@host)."""
        edits = Edits(dict(set or {}), answer, dry_run, by)
        return self._after(rewind_run(self._runs, self._driver, run_id, to, effects, edits))

    def verify(self, run_id: str) -> RunResult:
        """Re-execute the agent against the log with every live call forbidden: raises
        ``NonDeterminismError`` naming the first call that diverges; writes nothing."""
        return verify_run(self._runs, self._driver, run_id)

    def verify_all(
        self, agent: str | None = None, status: str | None = None
    ) -> list[dict[str, Any]]:
        """Replay every unfinished run (``status``: the runs of that status, finished ones
        too) of ``agent`` (None: all) against the current code, executing nothing: a
        ``{"run_id", "divergence"}`` per run that diverges, [] if none. Run it before a deploy."""
        return verify_all(self._runs, self._driver, agent, status)

    def adopt(self, run_id: str, agent: AgentDef | str | None = None) -> RunResult:
        """Take on an imported run: record who adopted it, when, and which agent runs it
        (``module:qualname`` or a definition; None keeps the one it names). Until then
        resume, answer, abandon, rewind and verify refuse it and recover skips it."""
        return adoption.adopt(self, self.leases, run_id, agent)
