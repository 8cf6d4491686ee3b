"""The Engine: decorators that register tools and agents, and the runs it drives.

Opening an engine touches no store until first use, so whoever *runs* an agent (a
script, the CLI with ``--url``) decides where the run is recorded.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import threading
import uuid
from collections.abc import Callable, Iterator
from typing import Any, overload

from .. import events as ev
from .. import observe
from ..errors import AgentlogError, RunBusy, UsageError
from ..history import (
    DEFAULT_SNAPSHOT_EVERY,
    RunWriter,
    check_run_id,
    checkpoints,
    read_events,
    run_stream,
    state_at,
)
from ..kinds import Effects, RunStatus
from ..policy import CircuitBreaker, Classifier, RetryPolicy, describe
from ..secrets import key_check, refuse_secret_input, replay_key
from ..state import CheckpointRef, RunState
from ..store import Store, cipher_configured
from . import adoption, calls, registry
from .answer import answer as answer_run
from .catalog import Catalog
from .config import EngineConfig
from .context import current
from .defs import DEFAULT_REDACT, AgentDef, ToolDef, normalize, qualified
from .driver import Driver
from .driver import resume as resume_run
from .driver import verify as verify_run
from .guards import Guards
from .journal import Journal
from .leases import Leases, new_owner
from .repository import RunRepository
from .results import EventView, RunResult
from .rewind import rewind as rewind_run
from .saga import abandon as abandon_run


class Engine(Catalog):
    """Registers tools and agents; runs, resumes, rewinds and inspects runs in one store."""

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

    @classmethod
    def open(cls, url: str | None = None) -> Engine:
        """An engine on ``url`` (default ``$AGENTLOG_URL``, else ``sqlite:///./agentlog.db``)."""
        return cls(url)

    @contextlib.contextmanager
    def kept_open(self, store: Store) -> Iterator[bool]:
        """Whether ``store`` is this engine's open store; ``close`` waits until the block
        ends (a thread outliving its run, such as a late tool result, writes safely)."""
        with self._closing:
            yield self._store is store

    def close(self) -> None:
        with self._closing:
            super().close()

    # --- decorators ------------------------------------------------------------------

    @overload
    def tool(self, fn: Callable[..., Any]) -> Callable[..., Any]: ...
    @overload
    def tool(self, fn: None = None, **options: Any) -> Callable[[Callable[..., Any]], Any]: ...

    def tool(self, fn: Callable[..., Any] | None = None, **options: Any) -> Any:
        """Make ``fn`` a durable tool: inside a run its calls are recorded and replayed."""
        if fn is None:
            return lambda f: self.tool(f, **options)
        tool = _tool_def(fn, **options)
        registry.add_tool(tool)

        if tool.is_async:

            @functools.wraps(fn)
            async def durable_async(*args: Any, **kwargs: Any) -> Any:
                ctx = current()
                if ctx is None:
                    return await fn(*args, **kwargs)
                # The identity is taken now, before any await: concurrent calls
                # (asyncio.gather) number in the order they are issued.
                number = ctx.next_call()
                loop = asyncio.get_running_loop()
                call = asyncio.ensure_future(
                    asyncio.to_thread(
                        calls.call_tool, ctx, tool, args, kwargs, number=number, loop=loop
                    )
                )
                ctx.in_flight.add(call)
                call.add_done_callback(ctx.in_flight.discard)
                return await call

            durable_async.__agentlog_tool__ = tool  # type: ignore[attr-defined]
            return durable_async

        @functools.wraps(fn)
        def durable(*args: Any, **kwargs: Any) -> Any:
            ctx = current()
            if ctx is None:
                return fn(*args, **kwargs)  # outside a run: a plain call
            return calls.call_tool(ctx, tool, args, kwargs)

        durable.__agentlog_tool__ = tool  # type: ignore[attr-defined]
        return durable

    @overload
    def agent(self, fn: Callable[..., Any]) -> AgentDef: ...
    @overload
    def agent(
        self, fn: None = None, *, snapshot_every: int = ..., name: str | None = ...
    ) -> Callable[[Callable[..., Any]], AgentDef]: ...

    def agent(
        self,
        fn: Callable[..., Any] | None = None,
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        name: str | None = None,
    ) -> Any:
        """Register ``fn(run, **input)`` as an agent."""
        if fn is None:
            return lambda f: self.agent(f, snapshot_every=snapshot_every, name=name)
        qual, path = qualified(fn)
        agent = AgentDef(fn, name or qual, path, snapshot_every=snapshot_every)
        registry.add_agent(agent)
        return agent

    # --- running ---------------------------------------------------------------------

    @functools.cached_property
    def _runs(self) -> RunRepository:
        """How this engine finds, leases and loads runs."""
        return RunRepository(self, self.leases)

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
            return self._driver.drive(a, writer, Journal(), data, check=started.key_check)

    async def arun(self, agent: AgentDef | Callable[..., Any], /, **input: Any) -> RunResult:
        """``run`` from inside an event loop (the run executes in a worker thread)."""
        return await asyncio.to_thread(self.run, agent, **input)

    def resume(self, run_id: str) -> RunResult:
        """Continue a crashed, failed or answered run from its log."""
        return resume_run(self._runs, self._driver, run_id)

    def recover(self) -> list[RunResult]:
        """Resume every run whose owner died (lease expired, or its process is gone).

        A run that cannot be resumed (a damaged log, changed code, an agent that no longer
        imports, an unexpected error) does not stop the others: its result keeps the run's
        status, says why in ``error`` and sets ``not_resumed`` ("refused" or "unexpected").
        An imported run nobody adopted is skipped: it has no owner, and it is not code.
        """
        results = []
        for row in self.store.runs(RunStatus.RUNNING):
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

    def answer(self, run_id: str, value: Any) -> RunResult:
        """Answer the question a paused run waits on, and continue it."""
        return answer_run(self._runs, self._driver, run_id, value)

    def abandon(self, run_id: str) -> RunResult:
        """Stop a run for good, running its compensations in reverse order."""
        return abandon_run(self._runs, run_id)

    def rewind(self, run_id: str, to: int | str, effects: str = Effects.REUSE) -> RunResult:
        """Fork a new run from a checkpoint name or position of ``run_id`` and continue it.

        The parent's side effects after ``to``: ``"reuse"`` records the parent's outcome
        when the fork makes the same call (nothing is sent), ``"compensate"`` undoes them
        first (recorded in the parent), ``"resend"`` sends them again under the fork's keys.
        """
        return rewind_run(self._runs, self._driver, run_id, to, effects)

    def verify(self, run_id: str) -> RunResult:
        """Re-execute the agent against the log with every live call forbidden.

        Raises ``NonDeterminismError`` naming the first call that diverges; writes nothing.
        """
        return verify_run(self._runs, self._driver, run_id)

    def adopt(self, run_id: str, agent: AgentDef | str | None = None) -> RunResult:
        """Take on an imported run: record who adopted it, when, and which agent runs it
        (``module:qualname`` or a definition; None keeps the one it names). Until then
        resume, answer, abandon, rewind and verify refuse it and recover skips it."""
        return adoption.adopt(self, self.leases, run_id, agent)

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


def _tool_def(
    fn: Callable[..., Any],
    *,
    name: str | None = None,
    side_effect: bool = False,
    key: Callable[..., str] | None = None,
    verify: Callable[[str], Any] | None = None,
    compensate: Callable[[Any], Any] | None = None,
    retry: RetryPolicy | None = None,
    timeout: float | str | None = None,
    breaker: CircuitBreaker | None = None,
    fallback: Callable[..., Any] | None = None,
    classify: Classifier | None = None,
    redact: tuple[str, ...] | list[str] = (),
    redact_default: bool = True,
) -> ToolDef:
    return ToolDef(
        fn,
        name or str(getattr(fn, "__qualname__", getattr(fn, "__name__", "tool"))),
        side_effect=side_effect,
        key=key,
        verify=verify,
        compensate=compensate,
        retry=retry or RetryPolicy(),
        timeout=timeout,
        breaker=breaker,
        fallback=fallback,
        classify=classify,
        redact=(DEFAULT_REDACT if redact_default else frozenset()) | set(redact),
    )
