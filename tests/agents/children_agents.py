"""A parent and its children whose side effects post with httpx to the loopback service
named by ``$AGENTLOG_TEST_HTTP`` (tests/agents/loopback.py), for tests that SIGKILL the
process holding a whole tree of runs.

``python -m tests.agents.children_agents URL RUN_ID ORDERS_JSON`` runs ``team`` over the
orders; a recoverer finds the agents through the import path the runs recorded.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import httpx

from engine import Engine

engine = Engine.open()


def _lookup(key: str) -> Any:
    r = httpx.get(os.environ["AGENTLOG_TEST_HTTP"] + f"/effects/{key}", timeout=10.0)
    return r.json() if r.status_code == 200 else None


@engine.tool(side_effect=True, key=lambda order: f"charge:{order}", verify=_lookup)
def charge(order: str) -> Any:
    """A business key sent as the header; a verifier that asks the service."""
    url = os.environ["AGENTLOG_TEST_HTTP"] + "/charge"
    r = httpx.post(url, json={"order": order}, headers={"Idempotency-Key": f"charge:{order}"})
    r.raise_for_status()
    return r.json()


@engine.agent
def worker(run: Any, order: str) -> str:
    return str(charge(order)["receipt"])


@engine.agent
def shipper(run: Any, order: str) -> str:
    """A worker with a child of its own: charges ``order`` without its ``ship-``."""
    return "shipped " + run.call(worker, order=order.removeprefix("ship-"))


@engine.agent
def team(run: Any, orders: list[str]) -> list[str]:
    kids = [run.spawn(shipper if o.startswith("ship") else worker, order=o) for o in orders]
    return list(run.gather(*kids))


if __name__ == "__main__":
    url, run_id, orders = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    r = Engine.open(url).run(team, run_id=run_id, orders=orders)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))
