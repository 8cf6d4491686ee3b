"""Agents for the worker tests of limits and drains, calling the timing service
(campaign/overlap.py).

    limited  ``calls`` read-only calls of ``seconds`` each, in its partition
    drained  one long side-effecting call (business key ``long:<n>``), then a short one
             (``after:<n>``): a worker drained during the first finishes it, and another
             worker makes the second
"""

from __future__ import annotations

from typing import Any

from engine import Engine

from .overlap import call

engine = Engine.open()


@engine.tool
def work(partition: str, op: str, seconds: float) -> str:
    """A call the service times (read-only: a takeover simply makes it again)."""
    return str(call("/work", partition=partition, op=op, key=op, seconds=seconds)["receipt"])


def _found(key: str) -> str | None:
    receipt = call("/find", key=key)["receipt"]
    return None if receipt is None else str(receipt)


@engine.tool(side_effect=True, key=lambda op, seconds: op, verify=_found)
def effect(op: str, seconds: float, *, idempotency_key: str) -> str:
    """An effect booked once per key, after ``seconds`` of work at the service."""
    body = {"partition": "-", "op": op, "key": idempotency_key, "seconds": seconds}
    return str(call("/work", **body)["receipt"])


@engine.agent
def limited(run: Any, part: str, i: int, calls: int, seconds: float) -> int:
    for k in range(calls):
        work(part, f"lim:{i}:{k}", seconds)
    return i


@engine.agent
def drained(run: Any, n: int, seconds: float) -> str:
    effect(f"long:{n}", seconds)
    effect(f"after:{n}", 0.0)
    return f"drained {n}"
