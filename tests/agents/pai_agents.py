"""A pydantic-ai agent made durable (engine.integrations.pydantic_ai), for tests that
SIGKILL its process. Its scripted model charges two orders, one a turn, then answers; it
counts its calls in ``$PAI_DIR/model.log`` and kills its own process on call number
``$PAI_KILL_AT_MODEL``. The ``charge`` tool is a side effect that writes a row of
``$PAI_DIR/effects.db``, under the business key ``charge:<order>``, which its verifier
looks up. Counts live outside the log, so a test sees what really ran.

``python -m tests.agents.pai_agents URL RUN_ID [unverified|writer]`` starts a run; a resumer
finds the agent through the import path the run recorded.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from engine import Engine
from engine.integrations.pydantic_ai import DurableAgent

ORDERS = ["o1", "o2"]
registry = Engine.open("memory://")  # defines the agent and its tools; runs use their own


def _dir() -> Path:
    return Path(os.environ["PAI_DIR"])


def _effects() -> sqlite3.Connection:
    db = sqlite3.connect(_dir() / "effects.db")
    db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT, receipt TEXT)")
    db.execute("CREATE TABLE IF NOT EXISTS refunds (receipt TEXT)")
    return db


def model_calls() -> int:
    log = _dir() / "model.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def charges() -> list[str]:
    with _effects() as db:
        return [k for (k,) in db.execute("SELECT key FROM charges ORDER BY key")]


def refunds() -> list[str]:
    with _effects() as db:
        return [r for (r,) in db.execute("SELECT receipt FROM refunds ORDER BY receipt")]


def _model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    with open(_dir() / "model.log", "a") as log:
        log.write("call\n")
    if model_calls() == int(os.environ.get("PAI_KILL_AT_MODEL", "0")):
        os.kill(os.getpid(), signal.SIGKILL)
    done = sum(1 for m in messages for p in m.parts if p.part_kind == "tool-return")
    if done < len(ORDERS):
        call = ToolCallPart("charge", {"order": ORDERS[done]}, tool_call_id=f"c{done}")
        return ModelResponse(parts=[call])
    return ModelResponse(parts=[TextPart(f"charged {done} orders")])


shop = Agent(FunctionModel(_model), name="pai_shop")


@shop.tool_plain
def charge(order: str) -> str:
    receipt = f"receipt-{order}"
    with _effects() as db:
        db.execute("INSERT INTO charges VALUES (?, ?)", (f"charge:{order}", receipt))
    return receipt


def _charged(key: str) -> Any:
    """The verifier: the receipt if the charge landed, else None."""
    with _effects() as db:
        row = db.execute("SELECT receipt FROM charges WHERE key = ?", (key,)).fetchone()
    return None if row is None else row[0]


def _refund(receipt: str) -> None:
    """The compensation: what the charge returned is refunded."""
    with _effects() as db:
        db.execute("INSERT INTO refunds VALUES (?)", (receipt,))


durable = DurableAgent(
    shop,
    registry,
    side_effects={
        "charge": {
            "key": lambda order: f"charge:{order}",
            "verify": _charged,
            "compensate": _refund,
        }
    },
)
# No verifier: an uncertain charge is asked of a person, never re-sent.
unverified = DurableAgent(shop, registry, name="pai_shop_unverified", side_effects={"charge": {}})


async def _stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str]:
    """A streamed answer; killed after its first chunk when ``$PAI_KILL_IN_STREAM`` is set
    and this is the first call."""
    with open(_dir() / "model.log", "a") as log:
        log.write("stream\n")
    for chunk in ["Dear ", "customer, ", "thanks."]:
        yield chunk
        if os.environ.get("PAI_KILL_IN_STREAM") and model_calls() == 1:
            os.kill(os.getpid(), signal.SIGKILL)


writer = DurableAgent(Agent(FunctionModel(stream_function=_stream), name="pai_writer"), registry)


@registry.agent
def pai_writer(run: Any, prompt: str) -> str:
    with writer.run_stream_sync(prompt) as result:
        return "".join(result.stream_text(delta=True, debounce_by=None))


@registry.agent
def pai_shop(run: Any, prompt: str) -> str:
    return durable.run_sync(prompt).output


@registry.agent
def pai_shop_unverified(run: Any, prompt: str) -> str:
    return unverified.run_sync(prompt).output


if __name__ == "__main__":
    url, run_id = sys.argv[1:3]
    agents = {"unverified": pai_shop_unverified, "writer": pai_writer}
    agent = agents[sys.argv[3]] if sys.argv[3:] else pai_shop
    r = Engine.open(url).run(agent, run_id=run_id, prompt="charge the orders")
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))
