"""An agent whose code a test deploys anew (tests/cli/test_cli_verify_all.py): ``CODE``
names the version that runs, "v1" (before), "bad" (a tool call added unguarded) or "v2"
(the same call under ``run.patched``); ``CALLS`` counts what reached each tool."""

from __future__ import annotations

from collections import Counter
from typing import Any

from engine import Engine

engine = Engine.open()
CODE = "v1"
CALLS: Counter[str] = Counter()


@engine.tool
def get_order(order: str) -> str:
    CALLS[f"get_order:{order}"] += 1
    return "delivered"


@engine.agent
def support(run: Any, order: str) -> str:
    plan = run.decide("triage", lambda o: f"refund {o}", order)
    if CODE == "bad" or (CODE == "v2" and run.patched("lookup")):
        plan += f" ({get_order(order)})"
    return f"{plan}: {run.ask('refund it?')}"
