"""What the decorators make: a function turned into an engine's durable tool, or its agent.

A tool's wrapper keeps the function's signature. Outside a run it is a plain call; inside
one it is a durable call (``calls.call_tool``). Sync and async wrappers share that
choice (:func:`_dispatch`) and differ only in awaiting it: an async tool's durable call
runs in the executing engine's thread pool while the event loop awaits it.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, ParamSpec, TypedDict, TypeVar, Unpack

from ... import codec, observe
from ...errors import UsageError
from ...log.history import DEFAULT_SNAPSHOT_EVERY
from ...log.rpo import RpoSpec, parse_rpo
from ...policy.budget import Budget
from ...policy.failure import CircuitBreaker, Classifier, RetryPolicy
from ...policy.recovery import Recovery
from ...policy.supervision import Supervisor
from ..call import entry as calls
from ..defs.definitions import DEFAULT_REDACT, AgentDef, ToolDef, qualified
from ..defs.registry import Registry
from ..model import decisions
from ..run.context import RunContext, covered, current

P = ParamSpec("P")
R = TypeVar("R")


class ToolOptions(TypedDict, total=False):
    """The options of ``@engine.tool(...)`` (CONTRACT.md); each has a default."""

    name: str | None  # default: the function's qualname
    side_effect: bool  # intent recorded and committed before the call
    key: Callable[..., object] | None  # the business key, from the call's arguments
    verify: Callable[[str], Any] | None  # verify(key) -> the recorded result, or None
    compensate: Callable[..., Any] | None  # compensate(result) on abandon
    retry: RetryPolicy | None
    timeout: float | Literal["adaptive"] | None
    breaker: CircuitBreaker | None
    fallback: Callable[..., Any] | None  # the degraded path while the breaker is open
    classify: Classifier | None
    redact: tuple[str, ...] | list[str]  # argument names never persisted or logged
    redact_default: bool  # also redact the secret words (CONTRACT's list)
    refresh_after: float | None  # a read executed again after a pause past its age


def tool(registry: Registry, fn: Callable[P, R], options: ToolOptions) -> Callable[P, R]:
    """``fn`` as a durable tool defined in ``registry``."""
    definition = tool_def(fn, **options)
    registry.add_tool(definition)

    if definition.is_async:

        async def durable_async(*args: Any, **kwargs: Any) -> Any:
            return await _dispatch(definition, fn, args, kwargs)

        wrapper: Callable[..., Any] = durable_async
    else:

        def durable(*args: Any, **kwargs: Any) -> Any:
            return _dispatch(definition, fn, args, kwargs)

        wrapper = durable
    functools.update_wrapper(wrapper, fn)
    wrapper.__agentlog_tool__ = definition  # type: ignore[attr-defined]
    return wrapper


def _dispatch(
    tool: ToolDef, fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """One call of ``tool``: outside a run, ``fn`` itself (an async tool's coroutine);
    inside one, the durable call (an async tool's as a future its wrapper awaits)."""
    ctx = current()
    if ctx is None:
        if tool.side_effect and not covered():
            _warn_outside_run(tool)
        return fn(*args, **kwargs)
    if not tool.is_async:
        return typed_call(ctx, tool, args, kwargs)
    return _submit(ctx, tool, args, kwargs)


_warned: set[str] = set()
_warned_lock = threading.Lock()


def _warn_outside_run(tool: ToolDef) -> None:
    """Warn, once per tool per process, that a side-effecting tool called outside any run
    sends for real with nothing recorded: no intent, no idempotency key, no replay."""
    with _warned_lock:
        if tool.name in _warned:
            return
        _warned.add(tool.name)
    observe.get(tool=tool.name).warning(
        "side_effect_tool_called_outside_run",
        detail="the effect happens for real, unrecorded: no intent, no idempotency key "
        "(a key-taking tool gets its default), no replay; call it from an agent's run",
    )


def typed_call(
    ctx: RunContext, tool: ToolDef, args: tuple[Any, ...], kwargs: dict[str, Any], **how: Any
) -> Any:
    """The durable call of ``tool``, its result as the type the tool declares (live and
    replayed alike; ``engine.codec``). An outcome that is not the tool's own value (a
    person's word on an uncertain effect, a fallback's) comes back as it was recorded."""
    result = calls.call_tool(ctx, tool, args, kwargs, **how)
    return codec.typed(result, tool.returns, f"result of tool {tool.name}", lenient=True)


def _submit(
    ctx: RunContext, tool: ToolDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> asyncio.Future[Any]:
    """Start an async tool's durable call in the engine's pool, with this context (the
    run). Its identity is taken now, before any await: concurrent calls
    (asyncio.gather) number in the order they are issued."""
    number = ctx.next_call()
    loop = asyncio.get_running_loop()
    work = functools.partial(
        contextvars.copy_context().run,
        typed_call,
        ctx,
        tool,
        args,
        kwargs,
        number=number,
        loop=loop,
    )
    call = loop.run_in_executor(ctx.host.executor(), work)
    ctx.in_flight.add(call)
    call.add_done_callback(ctx.in_flight.discard)
    return call


class ModelOptions(decisions.Policies, total=False):
    """The options of ``@engine.model(...)``: a decision's policies, and its name."""

    name: str | None  # default: the function's qualname


def model(fn: Callable[P, R], options: ModelOptions) -> Callable[P, R]:
    """``fn`` as a reusable model call: inside a run, each call is a recorded decision
    (``llm_decided``) under ``options``' policies; outside one, a plain call."""
    policies: decisions.Policies = {k: v for k, v in options.items() if k != "name"}  # type: ignore[assignment]
    name = options.get("name") or str(getattr(fn, "__qualname__", "model"))
    template = decisions.define(name, fn, policies, codec.returns(fn))

    def durable(*args: Any, **kwargs: Any) -> Any:
        ctx = current()
        if ctx is None:
            return fn(*args, **kwargs)
        return decisions.decide(ctx, template, args, kwargs)

    async def durable_async(*args: Any, **kwargs: Any) -> Any:
        return await durable(*args, **kwargs)

    wrapper: Callable[..., Any] = durable_async if template.is_async else durable
    functools.update_wrapper(wrapper, fn)
    wrapper.__agentlog_model__ = template  # type: ignore[attr-defined]
    return wrapper


def agent(
    registry: Registry,
    fn: Callable[P, R],
    *,
    snapshot_every: int = DEFAULT_SNAPSHOT_EVERY,
    name: str | None = None,
    supervise: Supervisor | None = None,
    budget: Budget | None = None,
    resume: str | Callable[[Any], object] = "auto",
    rpo: RpoSpec = None,
    version: str | None = None,
    invariants: Sequence[Callable[..., object]] = (),
    recovery: Recovery | None = None,
) -> AgentDef[P, R]:
    """``fn(run, **input)`` as an agent defined in ``registry`` (whose tools it uses);
    ``rpo`` is checked here, at declaration (``engine.log.rpo.parse_rpo``)."""
    if supervise is not None and not isinstance(supervise, Supervisor):
        raise UsageError(f"supervise= takes a Supervisor, not {type(supervise).__name__}")
    if budget is not None and not isinstance(budget, Budget):
        raise UsageError(f"budget= takes a Budget, not {type(budget).__name__}")
    if recovery is not None and not isinstance(recovery, Recovery):
        raise UsageError(f"recovery= takes a Recovery, not {type(recovery).__name__}")
    if not all(callable(check) for check in invariants):
        raise UsageError("invariants= takes predicates of (state, results)")
    qual, path = qualified(fn)
    objective = parse_rpo(rpo, f"agent {name or qual}")
    definition = AgentDef(
        fn,
        name or qual,
        path,
        snapshot_every=snapshot_every,
        registry=registry,
        supervise=supervise,
        budget=budget,
        resume=resume,
        rpo=objective,
        release=version,
        invariants=tuple(invariants),
        recovery=recovery,
    )
    registry.add_agent(definition)
    return definition


def tool_def(fn: Callable[..., Any], **options: Unpack[ToolOptions]) -> ToolDef:
    """The definition ``@engine.tool(**options)`` makes of ``fn``; TypeError for an
    option it does not know (a misspelt one is not ignored)."""
    unknown = sorted(set(options) - ToolOptions.__optional_keys__)
    if unknown:
        raise TypeError(f"@engine.tool got unexpected options: {', '.join(unknown)}")
    redact = options.get("redact", ())
    secret_words = DEFAULT_REDACT if options.get("redact_default", True) else frozenset()
    return ToolDef(
        fn,
        options.get("name") or str(getattr(fn, "__qualname__", getattr(fn, "__name__", "tool"))),
        side_effect=options.get("side_effect", False),
        key=options.get("key"),
        verify=options.get("verify"),
        compensate=options.get("compensate"),
        retry=options.get("retry") or RetryPolicy(),
        timeout=options.get("timeout"),
        breaker=options.get("breaker"),
        fallback=options.get("fallback"),
        classify=options.get("classify"),
        redact=secret_words | set(redact),
        refresh_after=options.get("refresh_after"),
    )
