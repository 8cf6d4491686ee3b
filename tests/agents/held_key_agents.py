"""Agents for the held-key tests: a business-keyed shipment that takes the idempotency
key (its outcome and its key's commit ride with the run's next commit) and can be voided.
Effects go to the fake service named by ``$AGENTLOG_TEST_SERVICE``.

``python -m tests.agents.held_key_agents URL RUN_ID ORDER THEN`` starts a run: it ships
``ORDER``, then asks a person (``THEN`` "ask") or returns (anything else).
"""

from __future__ import annotations

import json
import sys
from typing import Any

from engine import Engine, observe

from . import service

engine = Engine.open()


def _void(result: Any, idempotency_key: str | None = None) -> Any:
    return service.void(result["receipt"], idempotency_key)


# A short wait for another run's claim: the holder of a dead run's claim never settles it.
@engine.tool(side_effect=True, key=lambda order: f"ship:{order}", compensate=_void, timeout=1.0)
def ship(order: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("ship", order, idempotency_key), "key": idempotency_key}


@engine.agent(name="tests.held_key:shipper")
def shipper(run: Any, order: str, then: str) -> dict[str, str]:
    shipped = ship(order)
    if then == "ask":
        run.ask("hold")
    return shipped


def main(argv: list[str]) -> None:
    url, run_id, order, then = argv[:4]
    r = Engine.open(url).run(shipper, run_id=run_id, order=order, then=then)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))


if __name__ == "__main__":
    observe.configure()
    main(sys.argv[1:])
