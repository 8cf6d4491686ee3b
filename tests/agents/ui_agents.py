"""Agents for the web UI's tests (tests/ui/): a run that asks before it ships (the ship
waits on ``GATE``, set by default, so a browser test can watch the run move), a tool
whose result is markup, a charge that an abandon compensates, and a booking whose hold
claims the business key ``hold:ORDER``."""

from __future__ import annotations

import threading
from typing import Any

from engine import Engine, RetryPolicy, Transient

engine = Engine.open()

GATE = threading.Event()
GATE.set()
REFUNDS: list[str] = []
FLAKY: dict[str, int] = {}


@engine.tool
def look(order: str) -> str:
    """Read-only; its result is markup a page must show as text."""
    return f"<script>alert('{order}')</script>"


def refund(result: dict[str, Any]) -> None:
    REFUNDS.append(result["receipt"])


@engine.tool(side_effect=True, compensate=refund)
def charge(order: str) -> dict[str, Any]:
    return {"receipt": f"r-{order}"}


@engine.tool(side_effect=True)
def ship(order: str) -> str:
    GATE.wait(30)
    return f"shipped {order}"


@engine.tool(retry=RetryPolicy(initial=0, jitter=False))
def flaky(order: str) -> str:
    """Fails twice with a 503-like transient error, then answers."""
    FLAKY[order] = FLAKY.get(order, 0) + 1
    if FLAKY[order] <= 2:
        raise Transient("503 from the warehouse")
    return "in stock"


@engine.agent
def asker(run: Any, order: str) -> dict[str, Any]:
    seen = look(order)
    receipt = charge(order)
    run.checkpoint("charged")
    answer = run.ask("ship it?")
    shipped = ship(order) if answer == "yes" else None
    return {"seen": seen, "receipt": receipt["receipt"], "answer": answer, "shipped": shipped}


@engine.agent
def stocker(run: Any, order: str) -> str:
    return flaky(order)


@engine.tool(side_effect=True, key=lambda order: f"hold:{order}", compensate=lambda r: None)
def hold(order: str, *, idempotency_key: str) -> str:
    """Claims the business key ``hold:ORDER`` (the board's ``?key=`` finds its runs)."""
    return f"held {order}"


@engine.agent
def booking(run: Any, order: str) -> Any:
    hold(order)
    return run.ask("ship it?")
