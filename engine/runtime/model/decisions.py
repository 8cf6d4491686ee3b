"""Decisions: ``run.decide`` and ``@engine.model``, the model calls of a run, made under
the policies tools have (retry, timeout, circuit breaker, classification) and recorded
as one ``llm_decided`` with the usage they report.

    journal has its llm_decided?     -> its value (the declared type), budget checked
    journal has its final failure?   -> raised again (unless it ended the run: re-made)
    otherwise                        -> attempts under the policies (``call.drive``),
                                        each failure a ``tool_failed`` marked ``decision``

A decision writes no intent: it has no effect to doubt, so a crash before its outcome
just calls the model again. The run's budget (``engine.policy.budget``) is checked before a
model call starts and after each decision that reports usage, replayed ones included,
against what the log had recorded by then (``Journal.spent_at``): a resume fails where
the live run failed, concurrent decisions too.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypedDict

from ... import codec
from ... import events as ev
from ...errors import UsageError
from ...kinds import NOW
from ...policy import budget
from ...policy.failure import CircuitBreaker, Classifier, RetryPolicy, error_for
from ...secrets import redact
from ..call.drive import drive
from ..call.record import Call
from ..defs.definitions import ToolDef, args_hash, normalize
from ..journal.callstate import ATTEMPT, CallState
from ..run.context import detached

if TYPE_CHECKING:
    from ..run.context import RunContext


class Policies(TypedDict, total=False):
    """The policies a decision takes (``run.decide(..., retry=...)``, ``@engine.model``)."""

    retry: RetryPolicy | None  # default: RetryPolicy(), as tools
    timeout: float | None  # seconds ("adaptive" as tools)
    breaker: CircuitBreaker | None
    classify: Classifier | None
    # Tried in order when a transient failure is final (retries spent, breaker open):
    # another model, a rules function; the first to answer is the decision's value.
    fallback: Callable[..., Any] | Sequence[Callable[..., Any]] | None


POLICIES = frozenset(Policies.__optional_keys__)


@dataclass(eq=False)
class DecisionDef(ToolDef):
    """A decision's function under its policies: what the call machinery runs, as a
    read-only call whose outcome is an ``llm_decided``. Made per ``run.decide`` (cheap:
    nothing is introspected but what is given)."""

    decision: bool = True
    fallbacks: tuple[Callable[..., Any], ...] = ()

    def __post_init__(self) -> None:
        fixed = self.timeout is not None and self.timeout != "adaptive"
        if fixed and (not isinstance(self.timeout, int | float) or self.timeout <= 0):
            raise UsageError(f"decision {self.name!r}: timeout must be seconds > 0")
        if not isinstance(self.retry, RetryPolicy):
            raise UsageError(f"decision {self.name!r}: retry= takes a RetryPolicy")
        if not all(callable(f) for f in self.fallbacks):
            raise UsageError(f"decision {self.name!r}: fallback= takes functions (or a list)")


def define(
    name: str, fn: Callable[..., Any], policies: Policies, returns: Any = None
) -> DecisionDef:
    """The decision ``name`` calling ``fn`` under ``policies``."""
    unknown = sorted(set(policies) - POLICIES)
    if unknown:
        raise TypeError(f"unexpected decision options: {', '.join(unknown)}")
    return DecisionDef(
        fn,
        name,
        retry=policies.get("retry") or RetryPolicy(),
        timeout=policies.get("timeout"),
        breaker=policies.get("breaker"),
        classify=policies.get("classify"),
        is_async=inspect.iscoroutinefunction(fn),
        returns=returns,
        fallbacks=_chain(policies.get("fallback")),
    )


def _chain(given: Any) -> tuple[Callable[..., Any], ...]:
    if given is None:
        return ()
    return (given,) if callable(given) else tuple(given)


def split(kwargs: dict[str, Any]) -> tuple[Policies, dict[str, Any]]:
    """``run.decide``'s keyword arguments: its policies, and ``fn``'s own."""
    policies: Any = {k: v for k, v in kwargs.items() if k in POLICIES}
    return policies, {k: v for k, v in kwargs.items() if k not in POLICIES}


# --- a decision's identity and its replay -----------------------------------------


@dataclass(frozen=True)
class Identity:
    """A decision checked against the log: its call, name, arguments' hash and entry."""

    call: int
    name: str
    ahash: str
    entry: CallState | None
    returns: Any = None  # the declared result type (engine.codec)

    def typed(self, value: Any, live: bool = False) -> Any:
        """``value`` as the decision function declares it returns."""
        return codec.typed(value, self.returns, f"decision {self.name!r}", live=live)


def identify(
    ctx: RunContext,
    name: str,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    returns: Any,
    fn: Callable[..., Any] | None = None,
) -> Identity:
    """Take the decision's identity and check it against the log (before any await)."""
    call = ctx.next_call()
    given = normalize([args, kwargs], f"decision {name!r} arguments")
    ahash = args_hash(name, given, ctx.hash_key)
    # Secret-named arguments (by ``fn``'s parameter names, positional ones too): their
    # values are masked in messages, evidence and logs.
    redact(_named(fn, given) if args and fn is not None else given, seen=ctx.seen)
    return Identity(call, name, ahash, ctx.recorded(call, "decide", name, ahash), returns)


def _named(fn: Callable[..., Any], given: list[Any]) -> Any:
    """The normalised ``[args, kwargs]`` by ``fn``'s parameter names, as far as they bind."""
    args, kwargs = given
    try:
        return _signature(fn).bind_partial(*args, **kwargs).arguments
    except (TypeError, ValueError):  # no signature, or it does not bind: as given
        return given


_signatures: dict[Any, inspect.Signature] = {}


def _signature(fn: Callable[..., Any]) -> inspect.Signature:
    """``fn``'s signature, kept per code object (a lambda made anew for every decision
    has the same parameters each time); only names matter here, not defaults."""
    code = getattr(fn, "__code__", None)
    found = _signatures.get(code) if code is not None else None
    if found is None:
        found = inspect.signature(fn)
        if code is not None and len(_signatures) < 4096:
            _signatures[code] = found
    return found


def replayed_value(ctx: RunContext, d: Identity) -> Any:
    """The recorded decision's value; BudgetExhausted where the live run's was."""
    assert d.entry is not None and isinstance(d.entry.outcome, ev.LlmDecided)
    replayed_spend(ctx, d.call)
    return d.typed(d.entry.outcome.value)


def started(ctx: RunContext, d: Identity) -> float:
    """About to call the model live: when it started (the budget permitting)."""
    ctx.live(d.call, f"decide {d.name!r}")
    budget.check(ctx.agent.budget, spent(ctx), ctx.run_id, starting=True)
    return time.monotonic()


def record(
    ctx: RunContext,
    d: Identity,
    raw: Any,
    duration: float,
    attempt: int = 1,
    by: str | None = None,
) -> Any:
    """Record the decision's value ``raw`` with its usage; the value as the code gets it
    (the declared type: a value that does not fit records nothing)."""
    # Secret-named entries are redacted live too: the agent sees what a replay gives it.
    value = redact(normalize(raw, f"decision {d.name!r}"), seen=ctx.seen)
    result = d.typed(value, live=True)
    used = (budget.usage_of(raw) or budget.NONE) + ctx.take_usage()
    ctx.record(
        ev.LlmDecided(
            at=ctx.config.wall(),
            call=d.call,
            name=d.name,
            value=value,
            args_hash=d.ahash,
            duration=duration,
            attempt=attempt,
            tokens_in=used.tokens_in,
            tokens_out=used.tokens_out,
            cost=used.cost,
            answered_by=by,
        )
    )
    ctx.log.info("decided", call=d.call, name=d.name, answered_by=by)
    if used:
        budget.check(ctx.agent.budget, spent(ctx), ctx.run_id, starting=False)
    return result


def spent(ctx: RunContext) -> budget.Usage:
    """What the run's log says it spent so far (this execution's records included)."""
    s = ctx.writer.state
    return budget.Usage(s.tokens_in, s.tokens_out, s.cost)


def replayed_spend(ctx: RunContext, call: int) -> None:
    """A replayed call that reported usage: BudgetExhausted if the live run's spending
    had gone past the budget when it recorded that call (decided in log order, so
    concurrent decisions fail where they failed live)."""
    used = ctx.journal.spent_at.get(call)
    if used is not None:
        budget.check(ctx.agent.budget, used, ctx.run_id, starting=False)


def usage_call(ctx: RunContext, used: budget.Usage) -> None:
    """``run.usage`` in agent code: a call of its own (a replay counts what it recorded)."""
    call = ctx.next_call()
    entry = ctx.recorded(call, "usage", "usage")
    if entry is not None:
        replayed_spend(ctx, call)
        return
    ctx.live(call, "usage")
    event = ev.UsageRecorded(
        at=ctx.config.wall(),
        call=call,
        tokens_in=used.tokens_in,
        tokens_out=used.tokens_out,
        cost=used.cost,
    )
    ctx.record(event)
    if used:
        budget.check(ctx.agent.budget, spent(ctx), ctx.run_id, starting=False)


def now(ctx: RunContext) -> float:
    """``run.now()``: the engine's wall clock (``EngineConfig.wall``) read once and
    recorded as the decision ``run.now``; a replay returns the recorded reading."""
    d = identify(ctx, NOW, (), {}, float)
    if d.entry is not None and isinstance(d.entry.outcome, ev.LlmDecided):
        return float(d.entry.outcome.value)
    ctx.live(d.call, NOW)
    return float(record(ctx, d, ctx.config.wall(), 0.0))


# --- run.decide ---------------------------------------------------------------------


def decide(
    ctx: RunContext, model: DecisionDef, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> Any:
    """Make the decision ``model`` (a sync function: its value; async: an awaitable)."""
    d = identify(ctx, model.name, args, kwargs, model.returns, model.fn)
    if model.is_async:
        return _decide_async(ctx, model, d, args, kwargs)
    state = resumed_state(ctx, d)
    if state is None:
        return replayed_value(ctx, d)
    return _attempts(ctx, model, d, state, args, with_failure(ctx, model, d, kwargs), None)


async def _decide_async(
    ctx: RunContext,
    model: DecisionDef,
    d: Identity,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> Any:
    """``await run.decide(...)``: the attempts run in the engine's pool (they wait out
    backoffs and timeouts) while the model's coroutines run on this loop."""
    state = resumed_state(ctx, d)
    if state is None:
        return replayed_value(ctx, d)
    kwargs = with_failure(ctx, model, d, kwargs)
    loop = asyncio.get_running_loop()
    work = functools.partial(
        contextvars.copy_context().run, _attempts, ctx, model, d, state, args, kwargs, loop
    )
    return await loop.run_in_executor(ctx.host.executor(), work)


def with_failure(
    ctx: RunContext, model: DecisionDef, d: Identity, kwargs: dict[str, Any]
) -> dict[str, Any]:
    """A decision graded recovery re-plans (made live again) has the failure it recovers
    from in its input: ``failure=`` when its function takes that parameter (outside the
    arguments' hash: the log's ``recovery_decided`` holds it)."""
    failure = ctx.journal.replans.get(d.call)
    if failure is None or "failure" not in _signature(model.fn).parameters:
        return kwargs
    return {**kwargs, "failure": failure}


def resumed_state(ctx: RunContext, d: Identity) -> CallState | None:
    """Where the decision's attempts start; None when its value is recorded. A recorded
    final failure is raised again, unless it is the one that ended the run."""
    entry = d.entry
    if entry is None:
        return CallState("decide", d.name, d.ahash)
    out = entry.outcome
    if isinstance(out, ev.LlmDecided):
        return None
    if isinstance(out, ev.ToolFailed) and ctx.journal.failed_call != d.call:
        ctx.failed_call = d.call
        raise error_for(out.kind, f"{d.name}: {out.message}")
    return CallState("decide", d.name, d.ahash, attempts=entry.attempts)


def _attempts(
    ctx: RunContext,
    model: DecisionDef,
    d: Identity,
    state: CallState,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loop: asyncio.AbstractEventLoop | None,
) -> Any:
    started(ctx, d)
    decided = functools.partial(record, ctx, d)
    chain = None
    if model.fallbacks:
        chain = functools.partial(_fallbacks, ctx, model, d, args, kwargs, loop)
    call = Call(ctx, model, d.call, args, kwargs, d.ahash, {}, loop, decided, chain)
    return drive(call, state, ATTEMPT)


def _fallbacks(
    ctx: RunContext,
    model: DecisionDef,
    d: Identity,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    loop: asyncio.AbstractEventLoop | None,
) -> tuple[bool, Any]:
    """Each of ``model.fallbacks`` in turn, called once with the decision's arguments
    (the budget checked before each): the first that answers is recorded as the
    decision's value, naming it; (False, None) if none did."""
    for fallback in model.fallbacks:
        template = getattr(fallback, "__agentlog_model__", None)
        name = template.name if template is not None else fallback_name(fallback)
        budget.check(ctx.agent.budget, spent(ctx), ctx.run_id, starting=True)
        begun = time.monotonic()
        try:
            raw = detached(fallback, *args, **kwargs)
            if inspect.isawaitable(raw):
                raw = _awaited(raw, loop)
        except Exception as e:  # the next one is tried; the failure is logged
            ctx.log.info("fallback_failed", call=d.call, name=d.name, fallback=name, error=str(e))
            continue
        return True, record(ctx, d, raw, time.monotonic() - begun, by=name)
    return False, None


def fallback_name(fn: Callable[..., Any]) -> str:
    return str(getattr(fn, "__qualname__", None) or getattr(fn, "__name__", None) or fn)


def _awaited(awaitable: Any, loop: asyncio.AbstractEventLoop | None) -> Any:
    """An async fallback's value: on the agent's loop (this is a worker thread), else a
    loop of its own."""
    if loop is None:
        return asyncio.run(awaitable)
    return asyncio.run_coroutine_threadsafe(awaitable, loop).result()


__all__ = [
    "NOW",
    "POLICIES",
    "DecisionDef",
    "Identity",
    "Policies",
    "decide",
    "define",
    "now",
    "split",
]
