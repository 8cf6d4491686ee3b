"""The decorators of an engine: ``@engine.tool``, ``@engine.agent`` and ``@engine.model``,
each defining into the engine's registry (``declare`` makes the definitions)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, ParamSpec, TypeVar, Unpack, overload

from ... import codec
from ...log.history import DEFAULT_SNAPSHOT_EVERY
from ...log.rpo import RpoSpec
from ...policy.budget import Budget
from ...policy.recovery import Recovery
from ...policy.supervision import Supervisor
from ..defs.definitions import AgentDef
from ..defs.registry import Registry
from . import wrappers as declare
from .wrappers import ModelOptions, ToolOptions

P = ParamSpec("P")
R = TypeVar("R")
# ``@engine.agent(resume=...)``: "auto", "approve", or a predicate of the run's RunState.
Resume = str | Callable[[Any], object]


class Declaring:
    """What an engine declares with: its ``registry`` of tools and agents."""

    registry: Registry
    # engine.codec.register(type, encode, decode) on an engine (CONTRACT's ``engine``)
    # registers for every engine: the codec is the process's.
    codec = codec

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
        self,
        fn: Callable[P, R],
        *,
        snapshot_every: int = ...,
        name: str | None = ...,
        supervise: Supervisor | None = ...,
        budget: Budget | None = ...,
        resume: Resume = ...,
        rpo: RpoSpec = ...,
        version: str | None = ...,
        invariants: Sequence[Callable[..., object]] = ...,
        recovery: Recovery | None = ...,
    ) -> AgentDef[P, R]: ...
    @overload
    def agent(
        self,
        fn: None = None,
        *,
        snapshot_every: int = ...,
        name: str | None = ...,
        supervise: Supervisor | None = ...,
        budget: Budget | None = ...,
        resume: Resume = ...,
        rpo: RpoSpec = ...,
        version: str | None = ...,
        invariants: Sequence[Callable[..., object]] = ...,
        recovery: Recovery | None = ...,
    ) -> Callable[[Callable[P, R]], AgentDef[P, R]]: ...

    def agent(
        self,
        fn: Callable[P, R] | None = None,
        *,
        snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
        name: str | None = None,
        supervise: Supervisor | None = None,
        budget: Budget | None = None,
        resume: Resume = "auto",
        rpo: RpoSpec = None,
        version: str | None = None,
        invariants: Sequence[Callable[..., object]] = (),
        recovery: Recovery | None = None,
    ) -> Any:
        """Register ``fn(run, **input)`` as an agent of this engine (``name`` replaces the
        recorded ``module:qualname``; ``supervise`` restarts its children that fail;
        ``budget`` bounds what its model calls spend; ``resume="approve"``, or a
        predicate of the run's state, holds a crashed run for ``approve``; ``rpo=20``
        calls or ``rpo="30s"`` of work at most past the newest snapshot on recovery;
        ``version="2"`` is recorded per run: a worker of one version takes only its runs;
        ``invariants`` checked after every step, ``recovery`` how a failed step recovers)."""
        if fn is None:
            return lambda f: self.agent(
                f,
                snapshot_every=snapshot_every,
                name=name,
                supervise=supervise,
                budget=budget,
                resume=resume,
                rpo=rpo,
                version=version,
                invariants=invariants,
                recovery=recovery,
            )
        return declare.agent(
            self.registry,
            fn,
            snapshot_every=snapshot_every,
            name=name,
            supervise=supervise,
            budget=budget,
            resume=resume,
            rpo=rpo,
            version=version,
            invariants=invariants,
            recovery=recovery,
        )

    @overload
    def model(self, fn: Callable[P, R], **options: Unpack[ModelOptions]) -> Callable[P, R]: ...
    @overload
    def model(
        self, fn: None = None, **options: Unpack[ModelOptions]
    ) -> Callable[[Callable[P, R]], Callable[P, R]]: ...

    def model(self, fn: Callable[P, R] | None = None, **options: Unpack[ModelOptions]) -> Any:
        """Make ``fn`` a reusable model call: inside a run each call is a recorded
        decision under the policies given (``retry=``, ``timeout=``, ``breaker=``,
        ``classify=``, ``name=``), replayed as its declared type; outside, a plain call."""
        if fn is None:
            return lambda f: declare.model(f, options)
        return declare.model(fn, options)
