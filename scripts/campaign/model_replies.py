"""What the model workload's local model answers, as pure functions of the request: the
server (campaign/model_server.py) sends it, the agent (campaign/model_agent.py) checks
what it got, live and replayed, against it. Nothing here depends on a run id, so a
crashed run and its uncrashed twin get the same answers."""

from __future__ import annotations

import hashlib
from typing import Literal

from pydantic import BaseModel

Tool = Literal["pay", "reserve", "ship", "notify"]
TOOLS: tuple[Tool, ...] = ("pay", "reserve", "ship", "notify")


class Step(BaseModel):
    name: str
    weight: float
    done: bool = False


class TokenUsage(BaseModel):
    """An OpenAI-style usage block: the engine records it with the decision."""

    input_tokens: int
    output_tokens: int


class Plan(BaseModel):
    """The planner's structured output (what an SDK's ``parse`` returns)."""

    op: str
    tool: Tool
    cents: int
    steps: list[Step]
    rationale: str
    usage: TokenUsage


def _h(*parts: object) -> int:
    text = "|".join(map(str, parts)).encode()
    return int.from_bytes(hashlib.blake2b(text, digest_size=8).digest(), "big")


def plan_for(op: str, cents: int) -> Plan:
    """The plan the model returns for ``op`` quoted at ``cents``."""
    h = _h("plan", op, cents)
    tool = TOOLS[h % len(TOOLS)]
    steps = [
        Step(name=f"{tool}-{op}-{k}", weight=round(k / 7, 4), done=k % 2 == 0) for k in range(6)
    ]
    return Plan(
        op=op,
        tool=tool,
        cents=cents,
        steps=steps,
        rationale=f"{tool} {op} for {cents} cents (score {h % 1000})",
        usage=TokenUsage(input_tokens=50 + h % 50, output_tokens=10 + h % 20),
    )


def stream_lines(op: str, receipt: str) -> list[str]:
    """The lines of the streamed summary of ``op``'s effect: 60 to 100 chunks."""
    n = 60 + _h("stream", op) % 41
    return [f"[{op}] {receipt} part {k:03d}/{n}\n" for k in range(n)]


def rate_limited(run_id: str, name: str) -> int:
    """How many requests for the decision ``name`` of ``run_id`` get a 429 before one is
    answered: 0, 1 or 2."""
    return _h("429", run_id, name) % 3
