"""The policies an attempt runs under, as steps around it, and those between attempts.

An attempt is a pipeline: each step takes the next step, the call and its state, and
returns what came of it (``Returned``, ``Raised``, or ``CircuitOpen``). ``latency`` feeds
adaptive timeouts, ``breaker`` may refuse the attempt and learns from its end, and
``attempt`` (innermost) invokes the tool under its timeout and classifies a failure.
Between attempts, ``budget`` may refuse a retry and ``wait_retry`` records and waits out
its jittered backoff.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

import msgspec

from ... import events as ev
from ...errors import RunInterrupt
from ...kinds import CircuitState, FailureKind
from ...policy.failure import classify
from ..journal.callstate import CallState, CircuitOpen, Returned
from .invoke import invoke
from .record import Call, record, tool_stream_append


class Raised(msgspec.Struct, frozen=True):
    """The attempt raised ``error``, classified ``kind``."""

    kind: FailureKind
    error: BaseException
    duration: float


Outcome = Returned | Raised | CircuitOpen
Next = Callable[[Call, CallState], Outcome]
Step = Callable[[Next, Call, CallState], Outcome]  # its first argument: the next step
CIRCUIT_OPEN = CircuitOpen()


def attempt(call: Call, state: CallState) -> Outcome:
    """Invoke the tool once under the call's key; a failure is classified, never raised
    (except the run's own interruptions)."""
    tool, clock = call.tool, call.ctx.guards.clock
    started = clock()
    try:
        result = invoke(call, state.sends_under)
    except RunInterrupt:
        raise
    except Exception as exc:
        kind = classify(exc, side_effect=tool.side_effect, hook=tool.classify)
        return Raised(kind, exc, clock() - started)
    return Returned(result, clock() - started)


def breaker(then: Next, call: Call, state: CallState) -> Outcome:
    """Fail fast while the tool's circuit is open; a transient or indeterminate failure
    counts against it, a success closes it, any other end says nothing of its health."""
    tool, guards = call.tool, call.ctx.guards
    if tool.breaker is None:
        return then(call, state)
    circuit = guards.breaker(tool.name, tool.breaker)
    allowed, change = circuit.allow()
    _transition(call, change)
    if not allowed:
        return CIRCUIT_OPEN
    out = then(call, state)
    if isinstance(out, Returned):
        _transition(call, circuit.success())
    elif isinstance(out, Raised):
        if out.kind in (FailureKind.TRANSIENT, FailureKind.INDETERMINATE):
            _transition(call, circuit.failure())
        else:  # the tool answered; its health is unknown, not bad
            circuit.release()
    return out


def latency(then: Next, call: Call, state: CallState) -> Outcome:
    """A returned attempt's duration joins the tool's latency (its adaptive timeout: a
    tool with a fixed one or none keeps no latency)."""
    out = then(call, state)
    if isinstance(out, Returned) and call.tool.timeout == "adaptive":
        call.ctx.guards.latency(call.tool.name)[0].add(out.duration)
    return out


def chain(steps: Sequence[Step], last: Next) -> Next:
    """``steps`` around ``last``, the first outermost."""
    for step in reversed(steps):
        last = partial(step, last)
    return last


run_attempt = chain((latency, breaker), attempt)


def budget(call: Call) -> str | None:
    """Why a retry may not happen now (the run's or the tool's retry budget), if so."""
    guards = call.ctx.guards
    if call.ctx.writer.state.retries >= guards.run_retry_budget:
        return f"the run's retry budget ({guards.run_retry_budget} retries) is exhausted"
    if not guards.bucket(call.tool.name).take():
        return f"the global retry budget of tool {call.tool.name} is exhausted"
    return None


def wait_retry(call: Call, state: CallState, failed: ev.ToolFailed) -> CallState:
    """Record the failed attempt and the next one's jittered delay, then wait it out."""
    guards = call.ctx.guards
    delay = call.tool.retry.delay(state.attempts, guards.rng)
    retry = ev.RetryScheduled(
        at=call.ctx.config.wall(),
        call=call.number,
        tool=call.tool.name,
        attempt=state.attempts + 1,
        delay=delay,
        kind=failed.kind,
        decision=call.tool.decision,
    )
    state = record(call, state, failed, retry)
    call.ctx.log.info("tool_retry", call=call.number, tool=call.tool.name, delay=delay)
    guards.sleep(delay)
    return state


def _transition(call: Call, change: CircuitState | None) -> None:
    """Record a breaker transition in the tool's own stream."""
    if change is None:
        return
    tool, ctx = call.tool, call.ctx
    at = ctx.config.wall()
    event: Any
    if change == CircuitState.OPEN:
        assert tool.breaker is not None
        failures = ctx.guards.breaker(tool.name, tool.breaker).failures
        event = ev.CircuitOpened(at=at, tool=tool.name, failures=failures)
    elif change == CircuitState.HALF_OPEN:
        event = ev.CircuitHalfOpened(at=at, tool=tool.name)
    else:
        event = ev.CircuitClosed(at=at, tool=tool.name)
    tool_stream_append(ctx.store, tool.name, event)
    ctx.log.warning("circuit_" + change, tool=tool.name)
