"""Reads refreshed as a run continues after a pause: ``@engine.tool(refresh_after=SECONDS)``
(seed 003: a decision made at 3 pm does not use a price read at 10 am).

An execution that continues a run (a resume after a wait, a pause, a failure or a crash;
``RunContext.refresh`` is not None) and replays a recorded result of such a read that is
older than ``SECONDS`` by the engine's wall clock (``EngineConfig.wall``) executes the
read again, once, under its policies (timeout, breaker, latency). The agent code after it
sees the fresh value, recorded as ``tool_succeeded`` with source ``refreshed`` with the
run's next commit: later replays return it (the journal keeps a call's last outcome). A
refresh attempt that fails, or finds the circuit open, keeps the recorded value.

The log stays replayable. The refresh rides with the first commit, which comes once the
replay reached the live part of the run; if the fresh value makes the code diverge from a
call the log recorded after the read (a decision taken on the old value), nothing has been
written: the driver drops every refresh of that execution and executes the run again on
the recorded values (``refresh_dropped`` in the process's log). What recorded calls
already depend on is history, and stays.
"""

from __future__ import annotations

from typing import Any

from ... import events as ev
from ...errors import NonDeterminismError
from ...kinds import Source
from ...policy.failure import describe
from ..defs.definitions import ToolDef
from ..journal.callstate import CallState, Returned
from ..run.context import RunContext
from . import policies
from .record import Call, succeed


class RefreshDiverged(NonDeterminismError):
    """A refreshed read made the code diverge from the log before anything was written:
    the execution is done again without refreshing (``calls``: those it refreshed)."""

    def __init__(self, message: str, calls: list[int]) -> None:
        super().__init__(message)
        self.calls = calls


def stale(ctx: RunContext, tool: ToolDef, entry: CallState | None) -> bool:
    """Whether the recorded ``entry`` of ``tool`` is a result to execute again now."""
    if ctx.refresh is None or tool.refresh_after is None or entry is None:
        return False
    out = entry.outcome
    if not isinstance(out, ev.ToolSucceeded):
        return False
    return ctx.config.wall() - out.at > tool.refresh_after


def refreshed(call: Call, state: CallState, entry: CallState) -> Any:
    """Execute the stale read of ``entry`` again: its fresh value (recorded with the run's
    next commit), or the recorded one when the attempt does not return."""
    ctx, tool = call.ctx, call.tool
    recorded = entry.outcome
    assert isinstance(recorded, ev.ToolSucceeded) and ctx.refresh is not None
    ctx.live(call.number, f"refresh {tool.name}")
    out = policies.run_attempt(call, state)
    if not isinstance(out, Returned):
        why = describe(out.error) if isinstance(out, policies.Raised) else "circuit open"
        ctx.log.warning("refresh_failed", call=call.number, tool=tool.name, error=why)
        return recorded.result
    ctx.refresh.append(call.number)
    ctx.log.info(
        "tool_refreshed", call=call.number, tool=tool.name, age=ctx.config.wall() - recorded.at
    )
    return succeed(call, state, out.value, Source.REFRESHED, duration=out.duration)


def diverged(ctx: RunContext, error: NonDeterminismError, written_before: int) -> Exception:
    """What a divergence in ``ctx`` raises: ``RefreshDiverged`` when this execution
    refreshed reads and wrote nothing (its refreshes are dropped), else ``error``."""
    if not ctx.refresh or ctx.writer.state.position != written_before:
        return error
    calls = list(ctx.refresh)
    ctx.pending.clear()
    return RefreshDiverged(str(error), calls)


__all__ = ["RefreshDiverged", "diverged", "refreshed", "stale"]
