"""Child runs: ``run.spawn``, ``run.call``, ``run.gather`` and the handle a parent holds.

A spawn is a durable call (kind ``spawn``, named by the child's agent, its arguments the
child's input): live, it commits ``child_spawned`` in the parent with the child's
``agent_started`` and starts the child in a thread of its own; on replay it returns the
recorded child and starts nothing. Waiting for the child is the spawn call's outcome
(:mod:`.wait`); waking a parent when its child moves is :mod:`.wake`'s.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Generator
from typing import TYPE_CHECKING, Any, cast

from ... import codec
from ... import events as ev
from ...errors import ChildFailed, UsageError
from ...kinds import RETURNED
from ...log.history import rebuild
from ...secrets import refuse_secret_input
from ..call import forks
from ..declare import wrappers as declare
from ..defs.definitions import AgentDef, args_hash, normalize, qualified
from ..defs.registry import Registry
from .start import agent_started, open_child
from .wait import Waited, deliver, settle, settle_all
from .wake import after_run, child_due

if TYPE_CHECKING:
    from ..journal.callstate import CallState
    from ..run.context import RunContext

__all__ = ["Child", "after_run", "child_due", "gather", "open_child", "spawn"]


class Child:
    """A child run as its parent holds it: ``run_id``, ``status()``, ``result()`` (its
    output, waited for durably; ChildFailed if it failed), and ``await child`` in an
    async agent (the wait then holds a thread of the engine's pool, not the loop)."""

    def __init__(self, waited: Waited) -> None:
        self._waited = waited

    @property
    def run_id(self) -> str:
        """The child run the spawn started until the parent waits for it, then the run
        doing its work (a supervisor's restart may have replaced it): as the parent saw
        it live, so a replay gives what the original execution gave."""
        return self._waited.shown or self._waited.run_id

    @property
    def call(self) -> int:
        """The parent's spawn call."""
        return self._waited.call

    @property
    def ctx(self) -> RunContext:
        return self._waited.ctx

    def status(self) -> str:
        """The child's status now, as its log says."""
        return str(rebuild(self.ctx.store, self.run_id).status)

    def result(self) -> Any:
        """The child's output once it ends, as the type its agent declares it returns
        (ChildFailed if it failed or was abandoned). A child that asks a person pauses
        the parent; one that sleeps or waits for a message suspends it: the child's end
        continues it from here."""
        return settle(self._waited)

    def __await__(self) -> Generator[Any, None, Any]:
        return self._awaited().__await__()

    async def _awaited(self) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self.ctx.host.executor(), self.result)

    def __repr__(self) -> str:
        return f"Child(run_id={self.run_id!r}, call={self.call})"


def spawn(ctx: RunContext, agent: AgentDef[..., Any] | Any, input: dict[str, Any]) -> Child:
    """Start ``agent`` (a definition, or a plain function: registered as an agent of the
    parent's engine, as ``engine.run`` does) with ``input`` as a child run of ``ctx``."""
    a = definition(ctx, agent)
    data = normalize(input, "the child's input")
    a.check_input(data)
    refuse_secret_input(data, encrypted=ctx.store.encrypted)
    call = ctx.next_call()
    ahash = args_hash(a.name, data, ctx.hash_key)
    entry = ctx.recorded(call, "spawn", a.name, ahash)
    if entry is not None:
        return _replayed(ctx, call, entry, codec.returns(a.fn))
    ctx.live(call, f"spawn {a.name!r}")
    child_id = uuid.uuid4().hex
    reuses = forks.replaced_child(ctx, call, a.name, ahash)
    head = agent_started(a, data, ctx.config.wall(), parent_run_id=ctx.run_id, reuses=reuses)
    record = ev.ChildSpawned(
        at=head.at, call=call, child_run_id=child_id, agent=a.name, args_hash=ahash
    )
    began = time.monotonic()
    open_child(ctx, record, head)
    ctx.log.info("child_spawned", call=call, child=child_id, agent=a.name)
    return Child(Waited(ctx, call, child_id, started_at=began, returns=codec.returns(a.fn)))


def _replayed(ctx: RunContext, call: int, entry: CallState, returns: Any) -> Child:
    """The recorded child of spawn ``call``, with its recorded outcome, if any: a
    failure that ended the run is waited on again (the child may have been resumed), and
    so is any failure a supervisor answers."""
    assert entry.ref is not None  # child_spawned always names the child
    done = entry.outcome if isinstance(entry.outcome, ev.ChildFinished) else None
    outcome = done
    failed = done is not None and done.status not in RETURNED
    # A supervised parent's replay goes back to its supervisor (a restart a crash
    # interrupted is finished; one recorded, or an escalation, is not made twice).
    if failed and (ctx.journal.failed_call == call or ctx.agent.supervise is not None):
        outcome = None
    # The handle shows the run the spawn started until it is waited for (as it did live),
    # and the wait follows the run the log says does the child's work now.
    return Child(
        Waited(
            ctx,
            call,
            entry.ref,
            shown=entry.spawned,
            recorded=done,
            outcome=outcome,
            returns=returns,
        )
    )


def definition(ctx: RunContext, agent: Any) -> AgentDef[..., Any]:
    """The agent definition to spawn: ``agent`` itself, or a plain function registered
    (once) in the parent's engine, so the child's executor finds it by name."""
    if isinstance(agent, AgentDef):
        return agent
    if not callable(agent):
        raise UsageError(f"run.spawn takes an agent (a function), not {type(agent).__name__}")
    registry = ctx.agent.registry
    if not isinstance(registry, Registry):
        raise UsageError(f"{qualified(agent)[0]} is not an agent: decorate it with @engine.agent")
    known = registry.agent(qualified(agent)[0])
    if known is not None and known.fn is agent:
        return known
    return declare.agent(registry, agent)


def gather(ctx: RunContext, children: tuple[Child, ...]) -> list[Any]:
    """The outputs of ``children``, in the order given, once all have ended. If any
    failed, ChildFailed for the first failed one in that order is raised after all have
    ended; a child that pauses or suspends the parent stops the wait at once. In an
    async agent this returns an awaitable (``await run.gather(...)``)."""
    for c in children:
        if not isinstance(c, Child) or c.ctx is not ctx:
            raise UsageError("run.gather takes children this run spawned (run.spawn(...))")
    if ctx.agent.is_async:  # typed as its result: what ``await run.gather(...)`` gives
        return cast("list[Any]", _gathered(ctx, children))
    outcomes = settle_all([c._waited for c in children])  # one wait on all of them
    return _outputs(
        ctx, children, [_output(c, out) for c, out in zip(children, outcomes, strict=True)]
    )


def _output(c: Child, outcome: ev.ChildFinished | ChildFailed) -> Any:
    """A gathered child's output, or its failure (raised later, once all have ended)."""
    if isinstance(outcome, ChildFailed):
        return outcome
    try:
        return deliver(c._waited, outcome)
    except ChildFailed as failed:
        return failed


async def _gathered(ctx: RunContext, children: tuple[Child, ...]) -> list[Any]:
    """``gather`` for an async agent: the children are waited for at once."""
    tasks = [asyncio.ensure_future(c) for c in children]
    pending = set(tasks)
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_EXCEPTION)
        for t in done:
            stop = t.exception()
            if stop is not None and not isinstance(stop, ChildFailed):  # paused, waiting
                for p in pending:
                    p.cancel()
                raise stop
    return _outputs(ctx, children, [t.exception() or t.result() for t in tasks])


def _outputs(ctx: RunContext, children: tuple[Child, ...], outcomes: list[Any]) -> list[Any]:
    for c, out in zip(children, outcomes, strict=True):
        if isinstance(out, ChildFailed):
            ctx.failed_call = c.call
            raise out
    return outcomes
