"""The benchmark's workload and clock: the events of a plausible run, and rates and
mean times measured over a minimum duration."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from typing import Any

from msgspec.structs import replace

from engine import events as ev

T0 = 1_790_000_000.0

# --- realistic events ------------------------------------------------------------------


def tool_succeeded(i: int) -> ev.ToolSucceeded:
    """A typical tool result: a small dict, as a search or HTTP tool returns."""
    return ev.ToolSucceeded(
        at=T0 + i * 0.25,
        call=i,
        tool="web.search",
        result={
            "status": 200,
            "hits": 3,
            "top": f"https://example.com/articles/{i % 997}",
            "snippet": "Event sourcing stores every change as an immutable fact.",
            "elapsed_ms": 118,
        },
        duration=0.118,
    )


def run_events(n: int) -> list[ev.Event]:
    """``n`` events of a plausible run: a start, then tool calls and decisions."""
    out: list[ev.Event] = [
        ev.AgentStarted(
            at=T0,
            agent="bench.agents:researcher",
            import_path="bench.agents",
            input={"question": "How do durable agents recover from crashes?"},
        )
    ]
    call = 0
    while len(out) < n:
        call += 1
        at = T0 + len(out) * 0.25
        kind = call % 10
        if kind == 0:
            out.append(ev.StepCompleted(at=at, call=call, name=f"step-{call // 10}", duration=2.5))
        elif kind == 5:
            out.append(
                ev.LlmDecided(
                    at=at,
                    call=call,
                    name="next_action",
                    value={"action": "search", "query": f"durable agents {call}", "p": 0.82},
                    args_hash="9f2c4e1ab7d03f55",
                    duration=0.9,
                )
            )
        else:
            out.append(
                ev.ToolInvoked(
                    at=at,
                    call=call,
                    tool="web.search",
                    args={"q": f"durable agents part {call}", "limit": 3},
                    args_hash="5be0c2d9a1f3e877",
                )
            )
            if len(out) < n:
                s = tool_succeeded(call)
                out.append(replace(s, at=at + 0.1))
    return out[:n]


# --- timing helpers --------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def rate(step: Callable[[], Any], per_step: int, seconds: float, min_steps: int) -> float:
    """Events per second of ``step`` run for at least ``seconds`` and ``min_steps``."""
    gc.collect()
    n = 0
    start = time.perf_counter()
    while True:
        step()
        n += 1
        elapsed = time.perf_counter() - start
        if n >= min_steps and elapsed >= seconds:
            return n * per_step / elapsed


def per_call(fn: Callable[[], Any], seconds: float) -> float:
    """Mean seconds per call of ``fn`` over at least ``seconds`` (one call at least)."""
    return 1 / rate(fn, 1, seconds, 1)
