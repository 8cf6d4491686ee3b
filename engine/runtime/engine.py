"""The Engine: decorators that register tools and agents, and the runs it drives.

Opening an engine touches no store until first use, so whoever *runs* an agent (a
script, the CLI with ``--url``) decides where the run is recorded.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import os
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Executor, ThreadPoolExecutor
from typing import Any, TypeVar, overload

from typing_extensions import ParamSpec, Unpack

from .. import events as ev
from .. import observe
from ..errors import AgentlogError, NonDeterminismError, RunBusy, ToolError, UsageError
from ..history import (
    DEFAULT_SNAPSHOT_EVERY,
    RunWriter,
    check_run_id,
    checkpoints,
    read_events,
    read_run,
    run_stream,
    state_at,
)
from ..policy import describe
from ..secrets import key_check, redact, refuse_secret_input, replay_key, run_key
from ..state import CheckpointRef, RunState
from ..store import Store, cipher_configured
from . import adoption, calls, declare, lifecycle, registry
from .catalog import Catalog
from .config import EngineConfig
from .context import LogEnd, RunContext, _current, current
from .declare import ToolOptions
from .defs import AgentDef, normalize
from .guards import Guards
from .journal import Journal
from .leases import LeaseLost, Leases, new_owner
from .registry import Registry
from .results import EventView, RunResult

P = ParamSpec("P")
R = TypeVar("R")


class Engine(Catalog):
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
        self.leases = Leases(self.owner, ttl=config.lease_ttl)
        self.registry = Registry()
        self._pool: ThreadPoolExecutor | None = None
        self._pool_lock = threading.Lock()

    @classmethod
    def open(cls, url: str | None = None, *, config: EngineConfig | None = None) -> Engine:
        """An engine on ``url`` (default ``$AGENTLOG_URL``, else ``sqlite:///./agentlog.db``)."""
        return cls(url, config=config)

    @contextlib.contextmanager
    def kept_open(self, store: Store) -> Iterator[bool]:
        """Whether ``store`` is this engine's open store; ``close`` waits until the block
        ends (a thread outliving its run, such as a late tool result, writes safely)."""
        with self._closing:
            yield self._store is store

    def executor(self) -> Executor:
        """The thread pool async durable calls run in: created on first use (as many
        threads as asyncio's default pool), shut down by ``close``."""
        with self._pool_lock:
            if self._pool is None:
                size = min(32, (os.cpu_count() or 1) + 4)
                self._pool = ThreadPoolExecutor(size, thread_name_prefix="agentlog-call")
            return self._pool

    def close(self) -> None:
        """Close the store and shut the thread pool down; a thread still busy (a tool
        abandoned at its timeout) is not waited for. The engine may be used again."""
        with self._pool_lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=False)
        with self._closing:
            super().close()

    # --- decorators ------------------------------------------------------------------

    @overload
    def tool(self, fn: Callable[P, R], **options: Unpack[ToolOptions]) -> Callable[P, R]: ...
    @overload
    def tool(
        self, fn: None = None, **options: Unpack[ToolOptions]
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def tool(self, fn: Callable[P, R] | None = None, **options: Unpack[ToolOptions]) -> Any:
        """Make ``fn`` a durable tool of this engine: inside a run its calls are recorded
        and replayed. ``@engine.tool`` or ``@engine.tool(side_effect=True, ...)``; the
        wrapper keeps ``fn``'s parameters and result type."""
        if fn is None:
            return lambda f: declare.tool(self.registry, f, options)
        return declare.tool(self.registry, fn, options)

    @overload
    def agent(
        self, fn: Callable[P, R], *, snapshot_every: int = ..., name: str | None = ...
    ) -> AgentDef[P, R]: ...
    @overload
    def agent(
        self, fn: None = None, *, snapshot_every: int = ..., name: str | None = ...
    ) -> Callable[[Callable[P, R]], AgentDef[P, R]]: ...

    def agent(
        self,
        fn: Callable[P, R] | None = None,
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        name: str | None = None,
    ) -> Any:
        """Register ``fn(run, **input)`` as an agent of this engine (``name`` replaces the
        recorded ``module:qualname``)."""
        if fn is None:
            return lambda f: self.agent(f, snapshot_every=snapshot_every, name=name)
        return declare.agent(self.registry, fn, snapshot_every=snapshot_every, name=name)

    # --- running ---------------------------------------------------------------------

    def run(
        self, agent: AgentDef | Callable[..., Any], /, *, run_id: str | None = None, **input: Any
    ) -> RunResult:
        """Start ``agent`` with ``input`` as a new run (or, for an existing ``run_id``,
        continue it: a run id never runs twice)."""
        if current() is not None:
            raise UsageError("engine.run inside a run: start child runs from outside")
        a = agent if isinstance(agent, AgentDef) else self.agent(agent)
        rid = uuid.uuid4().hex if run_id is None else check_run_id(run_id)
        data = normalize(input, "the run's input")
        a.check_input(data)
        refuse_secret_input(data, encrypted=cipher_configured(self.url))
        with self.leases.hold(self.store, rid):
            if run_id is not None and self.store.last_position(run_stream(rid)) > 0:
                return self.resume(rid)
            writer = RunWriter(self.store, RunState(run_id=rid), snapshot_every=a.snapshot_every)
            started = ev.AgentStarted(
                at=ev.now(),
                agent=a.name,
                import_path=a.import_path,
                input=data,
                code_version=a.version,
                key_check=key_check(replay_key()),
            )
            writer.append(started)
            return self._drive(a, writer, Journal(), data, check=started.key_check)

    async def arun(self, agent: AgentDef | Callable[..., Any], /, **input: Any) -> RunResult:
        """``run`` from inside an event loop (the run executes in a worker thread)."""
        return await asyncio.to_thread(self.run, agent, **input)

    def resume(self, run_id: str) -> RunResult:
        """Continue a crashed, failed or answered run from its log."""
        rid = self.resolve(run_id)
        with self.leases.hold(self.store, rid):
            history = read_run(self.store, rid)
            state = history.state
            adoption.refuse_imported(state, "be resumed")  # finished or not: history only
            if state.status in ("completed", "abandoned"):
                return self._result(state)
            name, path = adoption.runs_as(state, history.recorded, "be resumed")
            agent = registry.load_agent(name, path, self.registry)
            journal = Journal.from_events(history.recorded)
            writer = RunWriter(self.store, state, snapshot_every=agent.snapshot_every)
            started = history.started
            return self._drive(
                agent, writer, journal, started.input, check=started.key_check, resumed=True
            )

    def recover(self) -> list[RunResult]:
        """Resume every run whose owner died (lease expired, or its process is gone).

        A run that cannot be resumed (a damaged log, changed code, an agent that no longer
        imports, an unexpected error) does not stop the others: its result keeps the run's
        status, says why in ``error`` and sets ``not_resumed`` ("refused" or "unexpected").
        An imported run nobody adopted is skipped: it has no owner, and it is not code.
        """
        results = []
        for row in self.store.runs("running"):
            if self.leases.dead_holder(self.store, row.run_id) is None:
                continue  # a live owner is executing it
            try:
                if adoption.imported(self.store, row.run_id):
                    continue
                results.append(self.resume(row.run_id))
            except RunBusy:
                continue  # another recoverer took it first
            except Exception as e:
                why = "refused" if isinstance(e, AgentlogError) else "unexpected"
                message = f"not resumed: {describe(e)}"
                logger = observe.get(run_id=row.run_id)
                logger.error("recover_skipped_run", reason=why, error=message)
                results.append(RunResult(row.run_id, row.status, error=message, not_resumed=why))
        return results

    def _drive(
        self,
        agent: AgentDef,
        writer: RunWriter,
        journal: Journal,
        input: dict[str, Any],
        *,
        check: str | None,
        resumed: bool = False,
        verify: bool = False,
    ) -> RunResult:
        """Execute ``agent`` against ``journal`` (the run's recorded calls), whose arguments
        were hashed under the key that ``check`` names (a different key here is refused
        before anything replays)."""
        rid = writer.state.run_id
        key = run_key(check, rid)
        ctx = RunContext(self, writer, journal, agent, hash_key=key, resumed=resumed, verify=verify)
        redact(input, seen=ctx.seen)  # secret input (stored encrypted): masked
        token = _current.set(ctx)
        try:
            output = agent.fn(ctx, **input)
            if asyncio.iscoroutine(output):
                output = _run_async(_settled(ctx, output))
            ctx.finish_check()
            if verify:
                return RunResult(rid, "completed", normalize(output, "the agent's output"))
            if writer.state.status == "completed":
                return self._result(writer.state)
            ctx.record(ev.AgentFinished(at=ev.now(), output=normalize(output, "agent output")))
            ctx.log.info("run_completed")
            return RunResult(rid, "completed", writer.state.output)
        except calls.Paused as p:
            return RunResult(rid, "paused", error=None, waiting=ctx.paused(p.reason))
        except LeaseLost as lost:
            ctx.deferred = []  # the new owner resolves them from the log
            ctx.log.error("run_stopped", reason=str(lost))
            return RunResult(rid, "running", error=str(lost))
        except Exception as e:
            ctx.check_diverged()  # agent code swallowed or wrapped a divergence: no record
            if isinstance(e, calls.NonDeterminismError):
                raise
            message = ctx.seen.mask(describe(e))
            if verify:
                return RunResult(rid, "failed", error=message)
            kind = e.kind if isinstance(e, ToolError) else "permanent"
            ctx.record(ev.AgentFailed(at=ev.now(), error=message, kind=kind, call=ctx.failed_call))
            ctx.log.info("run_failed", error=message)
            return RunResult(rid, "failed", error=message)
        finally:
            _current.reset(token)
            try:
                ctx.flush()  # e.g. interrupted by KeyboardInterrupt after an effect completed
            except Exception as e:  # the outcome stays uncertain and resolves on resume
                ctx.log.warning("deferred_outcome_not_recorded", error=str(e))
            ctx.end()

    def answer(self, run_id: str, value: Any) -> RunResult:
        """Answer the question a paused run waits on, and continue it."""
        return lifecycle.answer(self, run_id, value)

    def abandon(self, run_id: str) -> RunResult:
        """Stop a run for good, running its compensations in reverse order."""
        return lifecycle.abandon(self, run_id)

    def rewind(self, run_id: str, to: int | str, effects: str = "reuse") -> RunResult:
        """Fork a new run from a checkpoint name or position of ``run_id`` and continue it.

        The parent's side effects after ``to``: ``"reuse"`` records the parent's outcome
        when the fork makes the same call (nothing is sent), ``"compensate"`` undoes them
        first (recorded in the parent), ``"resend"`` sends them again under the fork's keys.
        """
        return lifecycle.rewind(self, run_id, to, effects)

    def verify(self, run_id: str) -> RunResult:
        """Re-execute the agent against the log with every live call forbidden.

        Raises ``NonDeterminismError`` naming the first call that diverges; writes nothing.
        """
        rid = self.resolve(run_id)
        history = read_run(self.store, rid)
        state = history.state
        agent = registry.load_agent(
            *adoption.runs_as(state, history.recorded, "be verified"), self.registry
        )
        writer, started = RunWriter(self.store, state), history.started
        journal = Journal.from_events(history.recorded)
        try:
            self._drive(agent, writer, journal, started.input, check=started.key_check, verify=True)
        except LogEnd as end:
            if state.status == "completed":  # its log is the whole run: nothing may follow
                raise NonDeterminismError(
                    f"run {rid} completed, but the code now goes on past its log: {end}"
                ) from None
        return self._result(state)

    def adopt(self, run_id: str, agent: AgentDef | str | None = None) -> RunResult:
        """Take on an imported run: record who adopted it, when, and which agent runs it
        (``module:qualname`` or a definition; None keeps the one it names). Until then
        resume, answer, abandon, rewind and verify refuse it and recover skips it."""
        return adoption.adopt(self, run_id, agent)

    # --- reading ---------------------------------------------------------------------

    def state(self, run_id: str, at: int | str | None = None) -> RunState:
        """The folded state at a position, a checkpoint name, or the latest."""
        return state_at(self.store, self.resolve(run_id), at)

    def checkpoints(self, run_id: str, upto: int | None = None) -> list[CheckpointRef]:
        """The run's named checkpoints (up to position ``upto``) in log order, each
        occurrence of a repeated name included; read from the log, not kept in state."""
        return checkpoints(self.store, self.resolve(run_id), upto)

    def events(self, run_id: str) -> list[EventView]:
        """The run's recorded events, in order."""
        return [EventView.of(r) for r in read_events(self.store, self.resolve(run_id))]

    @staticmethod
    def _result(state: RunState) -> RunResult:
        return RunResult(state.run_id, state.status, state.output, state.error, state.waiting)


def _run_async(coro: Any) -> Any:
    """Run an async agent to its end on a loop of its own. Called from inside a running
    loop (a notebook, an async caller of the sync ``run``), that loop's thread cannot
    host a second one: the agent's loop runs in a worker thread (with this thread's
    context: the run) while this thread blocks, as any sync call does."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    context = contextvars.copy_context()
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="agentlog-agent") as pool:
        return pool.submit(context.run, asyncio.run, coro).result()


async def _settled(ctx: RunContext, agent: Any) -> Any:
    """Await an async agent; however it ends, the durable calls it left in flight (the
    siblings of a failed or paused ``gather``) finish and are recorded first: the loop's
    shutdown would cancel them midway, and an effect may already have been sent."""
    try:
        return await agent
    finally:
        while ctx.in_flight:
            await asyncio.wait(list(ctx.in_flight))
