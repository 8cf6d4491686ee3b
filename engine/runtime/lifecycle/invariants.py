"""State invariants as fault detection: an agent's ``invariants=[fn, ...]``, each a pure
predicate ``fn(state, results)`` (or ``fn(state)``) of the folded state and the recorded
results, checked after every step and when the agent returns, live and on replay alike,
from the log only.

A false one (or one that raises) is a ``logical`` failure with evidence: which invariant,
which step, the values it saw. ``results`` maps each tool and decision name to its latest
recorded result; a compensated effect's is gone, and so are the calls a graded recovery
forgot (``recovery_decided.from_call``)."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from typing import Any

from ... import events as ev
from ...errors import InvariantViolated
from ...log.history import read_events
from ...log.state import RunState, evolve, observe
from ...store import Recorded
from ..run.context import RunContext


def results(recorded: Sequence[Recorded]) -> dict[str, Any]:
    """The latest recorded result of each tool and decision, by name, in call order."""
    by_call: dict[int, tuple[str, Any]] = {}
    for r in recorded:
        e = r.event
        if isinstance(e, ev.ToolSucceeded):
            by_call[e.call] = (e.tool, e.result)
        elif isinstance(e, ev.LlmDecided):
            by_call[e.call] = (e.name, e.value)
        elif isinstance(e, ev.Compensated) and e.error is None:
            by_call.pop(e.call, None)
        elif isinstance(e, ev.RecoveryDecided) and e.from_call is not None:
            by_call = {n: v for n, v in by_call.items() if n < e.from_call}
    return {name: value for _, (name, value) in sorted(by_call.items())}


def seen_at(recorded: Sequence[Recorded], call: int) -> tuple[RunState, dict[str, Any]] | None:
    """The state and results the log shows when the step of ``call`` last completed
    (None: the log holds no completion of it)."""
    ends = [
        i
        for i, r in enumerate(recorded)
        if isinstance(r.event, ev.StepCompleted) and r.event.call == call
    ]
    if not ends:
        return None
    upto = recorded[: ends[-1] + 1]
    state = RunState(run_id="")
    for r in upto:
        state = evolve(state, r.event, r.position)
    return state, results(upto)


def broken(
    checks: Sequence[Callable[..., object]], state: RunState, seen: dict[str, Any]
) -> tuple[str, str | None] | None:
    """The first invariant false of ``state`` and ``seen`` (its name, and the error it
    raised, if it raised); None when all hold."""
    for check in checks:
        name = getattr(check, "__qualname__", None) or repr(check)
        try:
            if not (check(state, seen) if _takes_results(check) else check(state)):
                return name, None
        except Exception as e:  # a predicate that cannot tell is no proof the state is sound
            return name, f"{type(e).__name__}: {e}"
    return None


def _takes_results(check: Callable[..., object]) -> bool:
    """Whether the predicate takes ``(state, results)``, not ``(state)`` alone."""
    try:
        params = inspect.signature(check).parameters.values()
    except (TypeError, ValueError):
        return True
    kinds = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    varargs = any(p.kind == inspect.Parameter.VAR_POSITIONAL for p in params)
    return varargs or sum(p.kind in kinds for p in params) >= 2


def check(ctx: RunContext, call: int, step: str) -> None:
    """After the step ``step`` (of ``call``): InvariantViolated if an invariant of the
    run's agent is false of what the log shows at the step's completion."""
    if not ctx.agent.invariants:
        return
    seen = seen_at(read_events(ctx.store, ctx.run_id), call)
    if seen is not None:  # None: verifying a log that ends before this step completed
        _hold(ctx, call, step, *seen)


def check_end(ctx: RunContext) -> None:
    """The agent returned: its invariants hold of the whole log (the outcomes deferred
    are committed first), or InvariantViolated."""
    if not ctx.agent.invariants:
        return
    ctx.flush()
    recorded = read_events(ctx.store, ctx.run_id)
    state = RunState(run_id="")
    for r in recorded:
        state = evolve(state, r.event, r.position)
    _hold(ctx, None, "the end", state, results(recorded))


def _hold(
    ctx: RunContext, call: int | None, step: str, state: RunState, values: dict[str, Any]
) -> None:
    checks = ctx.agent.invariants
    found = broken(checks, state, values)
    if found is None:
        return
    name, error = found
    evidence: dict[str, Any] = {
        "invariant": name,
        "step": step,
        "call": call,
        "values": {k: ctx.seen.mask(observe(v)) for k, v in values.items()},
    }
    if error is not None:
        evidence["error"] = ctx.seen.mask(error)
    where = "at the end" if call is None else f"after step {step!r}"
    raise InvariantViolated(f"invariant {name} is false {where}", evidence)


__all__ = ["broken", "check", "check_end", "results", "seen_at"]
