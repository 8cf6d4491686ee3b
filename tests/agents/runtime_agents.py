"""Agents for tests that run (and kill) real processes.

The module registers its tools and agents on an ``Engine.open()`` that touches no store;
whoever runs an agent decides the store. A resumer in a new process never imports this
module itself: it finds the agent through the import path the run recorded
(``tests.agents.runtime_agents``). Effects go to the fake service named by
``$AGENTLOG_TEST_SERVICE``.

``python -m tests.agents.runtime_agents URL RUN_ID AGENT [JSON_INPUT]`` starts a run.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from engine import Engine, observe

from . import service

engine = Engine.open()


@engine.tool
def quote(order: str) -> dict[str, Any]:
    """Read-only: outcome recorded, replayed on resume."""
    service.read_only("quote", order)
    return {"order": order, "cents": 100 * len(order)}


def _void(result: Any, idempotency_key: str | None = None) -> Any:
    # Declaring the key makes an interrupted undo safe to send again (the service voids a
    # receipt once); without it the engine stops and asks a person instead.
    return service.void(result["receipt"], idempotency_key)


@engine.tool(side_effect=True, compensate=_void)
def charge(op: str, *, idempotency_key: str) -> dict[str, str]:
    """Takes the idempotency key: an uncertain charge is re-sent with the same key."""
    return {"receipt": service.perform("charge", op, idempotency_key, delay=0.002)}


def _find_notice(key: str) -> dict[str, str] | None:
    receipt = service.by_op("notify", key.split(":", 1)[1])
    return None if receipt is None else {"receipt": receipt}


@engine.tool(side_effect=True, key=lambda order: f"notify:{order}", verify=_find_notice)
def notify(order: str) -> dict[str, str]:
    """A business key and a verifier, no idempotency key sent to the service."""
    return {"receipt": service.perform("notify", order, delay=0.002)}


@engine.agent(snapshot_every=4)
def durable_flow(run: Any, order: str, n: int = 3, confirm: bool = False) -> dict[str, Any]:
    q = quote(order)
    receipts = [charge(f"{order}-{i}")["receipt"] for i in range(n)]
    run.checkpoint("charged")
    receipts.append(notify(order)["receipt"])
    if confirm:
        receipts.append(run.ask("ship it?"))
    return {"quote": q["cents"], "receipts": receipts}


def _secrets() -> dict[str, str]:
    return json.loads(os.environ.get("AGENTLOG_TEST_SECRETS", "{}"))


@engine.tool(redact=("card_number",))
def authenticate(
    user: str, password: str, token: str, api_key: str, authorization: str, secret: str
) -> dict[str, str]:
    return {"user": user, "session": "s-1"}


@engine.tool(side_effect=True, redact=("card_number",))
def pay_by_card(order: str, card_number: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("pay_by_card", order, idempotency_key)}


@engine.agent
def secret_flow(run: Any, order: str) -> dict[str, Any]:
    """Secrets come from the environment (as from a vault), never from the run's input."""
    s = _secrets()
    auth = authenticate(
        "ann", s["password"], s["token"], s["api_key"], s["authorization"], s["secret"]
    )
    paid = pay_by_card(order, s["card_number"])
    return {"session": auth["session"], "receipt": paid["receipt"]}


def main(argv: list[str]) -> None:
    url, run_id, name = argv[:3]
    data = json.loads(argv[3]) if len(argv) > 3 else {}
    agent = {"durable_flow": durable_flow, "secret_flow": secret_flow}[name]
    r = Engine.open(url).run(agent, run_id=run_id, **data)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))


if __name__ == "__main__":
    observe.configure()  # an application configures logging (the engine never does)
    main(sys.argv[1:])
