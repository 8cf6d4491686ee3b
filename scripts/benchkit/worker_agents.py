"""The agents scripts/bench_workers.py hands to its worker processes (imported by
``agentlog worker --import benchkit.worker_agents``)."""

from __future__ import annotations

from typing import Any

from engine import Engine

engine = Engine()


@engine.tool(side_effect=True, key=lambda order, n: f"{order}:{n}")
def book(order: str, n: int, idempotency_key: str = "") -> int:
    """A keyed side effect with a ~100-byte result (nothing outside is called)."""
    return n


@engine.agent
def steps(run: Any, order: str, calls: int) -> int:
    """``calls`` keyed side-effecting calls."""
    return sum(book(order, n) for n in range(calls))


@engine.agent
def nap(run: Any, seconds: float) -> float:
    """Sleep durably, then return how late the wake was by the run's recorded clock."""
    due = run.now() + seconds
    run.sleep(seconds)
    return run.now() - due
