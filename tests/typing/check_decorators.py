"""Checked by mypy in scripts/test, never run: ``@engine.tool`` and ``@engine.agent``, bare
or with options, keep the function's parameters and result type. Each ``type: ignore``
marks a call mypy must reject: were the types lost, the ignore would be unused, which
strict mypy reports."""

from __future__ import annotations

from typing import Any, assert_type

from engine import CircuitBreaker, Engine, EngineConfig, RetryPolicy
from engine.runtime.defs.definitions import AgentDef

engine = Engine.open("memory://", config=EngineConfig(run_retry_budget=5))


@engine.tool
def lookup(customer_id: str) -> dict[str, int]:
    return {customer_id: 1}


def void(receipt: dict[str, str]) -> None:
    return None


@engine.tool(
    side_effect=True,
    key=lambda order_id, cents: f"refund:{order_id}",
    verify=lambda key: None,
    compensate=void,
    retry=RetryPolicy(max_attempts=5),
    timeout="adaptive",
    breaker=CircuitBreaker(failure_threshold=3),
    redact=("card_number",),
)
def refund(order_id: str, cents: int, *, idempotency_key: str = "") -> dict[str, str]:
    return {"order": order_id, "key": idempotency_key}


@engine.tool(timeout=2.5)
async def fetch(url: str) -> bytes:
    return url.encode()


@engine.agent
def support(run: Any, ticket: dict[str, str]) -> bool:
    return bool(lookup(ticket["customer"]))


@engine.agent(snapshot_every=10, name="billing")
async def billing(run: Any, order: str) -> int:
    return len(await fetch(order)) + len(refund(order, 5))


assert_type(lookup("c1"), dict[str, int])
assert_type(refund("o1", 500), dict[str, str])
assert_type(support(None, ticket={"customer": "c1"}), bool)


async def awaiting() -> None:
    assert_type(await fetch("https://example.org"), bytes)
    assert_type(await billing(None, order="o1"), int)
    await fetch(b"bytes")  # type: ignore[arg-type]


assert isinstance(support, AgentDef) and isinstance(billing, AgentDef)

lookup(42)  # type: ignore[arg-type]
refund("o1", cents="5")  # type: ignore[arg-type]
refund("o1")  # type: ignore[call-arg]
support(None, ticket=3)  # type: ignore[arg-type]
engine.tool(timeout="slow")  # type: ignore[call-overload]
engine.tool(side_effects=True)  # type: ignore[call-overload]
