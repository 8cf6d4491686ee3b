"""Durable timers: ``run.sleep`` and the deadline of a ``run.recv``.

A timer is call N with a ``timer_set`` event recording its wake-up time (epoch seconds on
the engine's wall clock, ``EngineConfig.wall``), written once: a re-execution keeps the
recorded time, so after a crash the run sleeps only what remains. A wait no longer than
``EngineConfig.inline_wait`` is waited out holding the thread; a longer one records
``run_waiting`` and stops the run (status ``waiting``, no thread held) until ``recover``
finds it due.

In an ``async def`` agent (its event loop running in this thread) ``run.sleep`` and
``run.recv`` return awaitables: ``await run.sleep(5)`` waits on the loop instead of
blocking it, so the agent's other tasks go on. The call's identity is taken, and its
timer recorded, when it is called, not when it is awaited.

Failpoint ``in_sleep``: the timer is recorded and the run is sleeping inline.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Awaitable, Generator
from typing import TYPE_CHECKING, Any, NoReturn

from ... import events as ev
from ... import failpoints
from ...errors import Suspended, UsageError
from ...kinds import Purpose, RunStatus, WaitReason
from ...log.waiting import of, shown
from ..defs.definitions import args_hash

if TYPE_CHECKING:
    from ..journal.callstate import CallState
    from ..run.context import RunContext


class Ready:
    """An awaitable that is already done: ``await`` gives ``value`` at once."""

    def __init__(self, value: Any = None) -> None:
        self.value = value

    def __await__(self) -> Generator[Any, None, Any]:
        return self.value
        yield  # a generator: __await__ must return an iterator


def in_loop(ctx: RunContext) -> bool:
    """Whether ``ctx`` runs an async agent on an event loop in this thread: its waits
    are awaitables then, never a blocked loop."""
    if not ctx.agent.is_async:
        return False
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def passed(ctx: RunContext, call: int) -> bool:
    """Whether the log records calls after ``call``: the wait there ended (whatever the
    clock says now), so a re-execution goes straight on."""
    return ctx.journal.last_call > call


MAX_WAIT = 10 * 365 * 86400.0  # a wait past this is a mistake (and past datetime's range)


def check_seconds(value: object, what: str) -> float:
    """``value`` as seconds to wait: a finite number, zero or more; else UsageError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise UsageError(f"{what} must be a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value) or not 0 <= value <= MAX_WAIT:
        raise UsageError(
            f"{what} must be a number of seconds from 0 to {MAX_WAIT:.0f} (ten years): {value!r}"
        )
    return float(value)


def deadline(
    ctx: RunContext,
    call: int,
    entry: CallState | None,
    seconds: float,
    purpose: Purpose = Purpose.SLEEP,
    topic: str | None = None,
    ahash: str = "",
) -> float:
    """The wake-up time of timer ``call``: the recorded one, else now + ``seconds``,
    recorded (``timer_set``, with the hash ``ahash`` of a sleep's duration) before
    anything waits on it."""
    if entry is not None and entry.until is not None:
        return entry.until
    at = ctx.config.wall()
    until = at + seconds
    timer = ev.TimerSet(
        at=at, call=call, until=until, purpose=purpose, topic=topic, args_hash=ahash
    )
    ctx.record(timer)
    return until


def suspend(
    ctx: RunContext, call: int, reason: WaitReason, until: float | None, topic: str | None = None
) -> NoReturn:
    """Stop the run until ``until`` (or a message on ``topic``): ``run_waiting`` is
    recorded, unless the run's log already ends waiting on exactly this (a run resumed
    before it was due writes nothing), then Suspended."""
    waiting = ev.RunWaiting(
        at=ctx.config.wall(), call=call, reason=reason, until=until, topic=topic
    )
    state = ctx.writer.state
    if state.status != RunStatus.WAITING or state.waits_on != of(waiting):
        ctx.record(waiting)
    raise Suspended(shown(of(waiting)))


def sleep(ctx: RunContext, seconds: float) -> Awaitable[None] | None:
    """``run.sleep``: wait ``seconds`` durably (see the module's docstring)."""
    seconds = check_seconds(seconds, "run.sleep")
    call = ctx.next_call()
    ahash = args_hash("run.sleep", {"seconds": seconds}, ctx.hash_key)
    # A log written before durations were hashed has none to compare: it replays as is.
    known = ctx.journal.calls.get(call)
    entry = ctx.recorded(call, "sleep", "", ahash if known and known.args_hash else "")
    if entry is not None and (ctx.verify or passed(ctx, call)):
        return Ready() if in_loop(ctx) else None
    if entry is None:
        ctx.live(call, "sleep")
    until = deadline(ctx, call, entry, seconds, ahash=ahash)
    remaining = until - ctx.config.wall()
    if remaining > ctx.config.inline_wait:
        suspend(ctx, call, WaitReason.TIMER, until)
    if in_loop(ctx):
        return _slept_async(remaining)
    if remaining > 0:
        failpoints.hit("in_sleep")
        time.sleep(remaining)
    return None


async def _slept_async(remaining: float) -> None:
    if remaining > 0:
        failpoints.hit("in_sleep")
        await asyncio.sleep(remaining)
