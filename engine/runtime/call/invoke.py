"""Invoking a tool once, bounded by its timeout: a sync tool in the caller's thread (no
timeout) or in a daemon thread of its own, an async tool on the agent's event loop (or a
loop of its own in a sync agent). A sync tool abandoned at its timeout may still return:
its late result is evidence, kept in the run while it runs, else in the tool's stream.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import threading
import time
from collections.abc import Callable
from typing import Any

import msgspec

from ... import events as ev
from ...errors import RunInterrupt, ToolBusy, UsageError
from ...policy.failure import describe
from ..defs.definitions import normalize
from ..run.context import detached, detached_async
from .record import Call, tool_stream_append


def timeout_of(call: Call) -> float | None:
    """The attempt's timeout in seconds: the tool's, or (``"adaptive"``) from its latency."""
    tool, ctx = call.tool, call.ctx
    timeout = tool.timeout
    if timeout == "adaptive":
        latency, fresh = ctx.guards.latency(tool.name)
        if fresh:  # seed from this run's recorded durations of the tool
            for entry in ctx.journal.calls.values():
                out = entry.outcome
                if isinstance(out, ev.ToolSucceeded) and out.tool == tool.name:
                    latency.add(out.duration)
        return latency.timeout()
    return float(timeout) if isinstance(timeout, int | float) else None


def invoke(call: Call, key: str | None) -> Any:
    """Call the tool once (a tool that takes it gets ``idempotency_key=key``)."""
    tool = call.tool
    kwargs = dict(call.kwargs)
    if tool.takes_key:
        kwargs["idempotency_key"] = key
    seconds = timeout_of(call)
    future: concurrent.futures.Future[Any]
    if tool.is_async:
        if call.loop is None:  # an async tool in a sync agent: its own loop, same timeout
            return asyncio.run(_bounded(detached_async(tool.fn(*call.args, **kwargs)), seconds))
        coro = detached_async(tool.fn(*call.args, **kwargs))
        future = asyncio.run_coroutine_threadsafe(coro, call.loop)
    elif seconds is None:
        return detached(tool.fn, *call.args, **kwargs)
    else:
        future = _in_daemon_thread(call, seconds, tool.fn, *call.args, **kwargs)
    try:
        return future.result(timeout=seconds)
    except concurrent.futures.CancelledError:
        # The agent's event loop cancelled the tool mid-flight (the run is ending): not a
        # failure to retry, since the request may have landed. Nothing is recorded; the
        # call stays uncertain, as after a crash, and resolves on resume.
        raise RunInterrupt(f"{tool.name} (call {call.number}) was cancelled") from None
    except concurrent.futures.TimeoutError as e:
        if future.done() and not future.cancelled() and future.exception() is e:
            # The tool's own TimeoutError (the same class as the futures one since 3.11),
            # not our deadline: classified like any exception the tool raises.
            raise
        if not future.cancel():
            _keep_late_result(call, future, time.monotonic())
        raise TimeoutError(f"no result within {seconds:.3g} s") from None


def _in_daemon_thread(
    call: Call, seconds: float, fn: Callable[..., Any], /, *args: Any, **kwargs: Any
) -> concurrent.futures.Future[Any]:
    """Call ``fn`` in a daemon thread of its own (outside any run), one of the tool's
    ``tool_threads``: ToolBusy (nothing sent) when none frees up within the attempt's
    timeout, as under a hung dependency. A tool abandoned past its timeout may never
    return: a pool's worker would keep the process from exiting (concurrent.futures
    joins its threads at exit), a daemon thread does not."""
    slots = call.ctx.guards.slots(call.tool.name)
    if not slots.acquire(timeout=seconds):
        raise ToolBusy(
            f"all {call.ctx.guards.tool_threads} threads of the tool's timed attempts "
            f"stayed busy for {seconds:.3g} s (attempts abandoned at their timeout still "
            "run); not sent"
        )
    future: concurrent.futures.Future[Any] = concurrent.futures.Future()

    def work() -> None:
        try:
            if not future.set_running_or_notify_cancel():
                return
            try:
                future.set_result(fn(*args, **kwargs))
            except BaseException as e:  # handed to the waiting caller, as a pool would
                future.set_exception(e)
        finally:
            slots.release()

    threading.Thread(target=work, name="agentlog-tool", daemon=True).start()
    return future


async def _bounded(coro: Any, seconds: float | None) -> Any:
    """Await ``coro`` for at most ``seconds``; past that it is cancelled (no late result)."""
    if seconds is None:
        return await coro
    task = asyncio.ensure_future(coro)
    done, _ = await asyncio.wait({task}, timeout=seconds)
    if not done:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task
        raise TimeoutError(f"no result within {seconds:.3g} s")
    return task.result()


def _keep_late_result(call: Call, future: concurrent.futures.Future[Any], since: float) -> None:
    """A sync tool abandoned in its thread: whatever it returns later is evidence only. It
    is recorded in the run while this execution still runs it; after that (the run ended,
    paused or failed) in the tool's own stream, naming the run and the call, never after
    the run's end."""

    ctx, tool, number = call.ctx, call.tool, call.number

    def keep(f: concurrent.futures.Future[Any]) -> None:
        seen = ctx.seen
        error = None if f.exception() is None else describe(f.exception())  # type: ignore[arg-type]
        event = ev.ToolLateResult(
            at=ctx.config.wall(),
            call=number,
            tool=tool.name,
            result=None if error else tool.redacted(_plain(f.result()), seen),
            error=None if error is None else seen.mask(error),
            after=time.monotonic() - since,
        )
        try:
            if ctx.record_while_running(event):
                return
        except (Exception, RunInterrupt) as e:  # e.g. this owner lost the run's lease
            ctx.log.warning("late_result_not_recorded_in_run", call=number, error=str(e))
        elsewhere = msgspec.structs.replace(event, run_id=ctx.run_id)
        with ctx.kept_open() as still_open:
            if not still_open:  # its connections are gone: touching them can crash
                ctx.log.warning("late_result_dropped", call=number, tool=tool.name)
                return
            kept = tool_stream_append(ctx.store, tool.name, elsewhere)
        if kept:
            ctx.log.info("late_result_kept_in_tool_stream", call=number, tool=tool.name)
        else:  # evidence is best effort: the call's outcome was decided at its timeout
            ctx.log.warning("late_result_not_recorded", call=number, tool=tool.name)

    future.add_done_callback(keep)


def _plain(value: Any) -> Any:
    """A late result as builtins (one that cannot be encoded is named by its type only:
    its repr may hold anything)."""
    try:
        return normalize(value, "late result")
    except UsageError:
        return f"<{type(value).__name__}>"
