"""The agent of the recovery figures' scenario (tests/views/test_projection_recovery.py), run in
real processes killed at failpoints. Effects go to the fake service named by
``$AGENTLOG_TEST_SERVICE``; undoing a receipt named in ``$AGENTLOG_TEST_UNDO_FAILS``
(comma-separated) fails, as a refused void would.

``python -m tests.agents.recovery_agents URL RUN_ID JSON_INPUT`` starts a run.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from engine import Engine, Permanent, RetryPolicy, Transient, observe

from . import service

engine = Engine.open()


@engine.tool
def look(order: str) -> dict[str, str]:
    """A read: slow by ``$AGENTLOG_TEST_LOOK_DELAY`` seconds when that is set."""
    time.sleep(float(os.environ.get("AGENTLOG_TEST_LOOK_DELAY", "0")))
    service.read_only("look", order)
    return {"order": order}


@engine.tool(retry=RetryPolicy(initial=0.01, jitter=False))
def flaky(order: str) -> str:
    """Fails (transiently) at its first request for ``order``: one retry."""
    seen = sum(1 for tool, op, _ in service.requests(kind="read") if (tool, op) == ("flaky", order))
    service.read_only("flaky", order)
    if seen == 0:
        raise Transient("busy, try again")
    return "ok"


@engine.tool
def reject(order: str) -> None:
    raise Permanent(f"order {order} is refused")


def _void(result: Any, idempotency_key: str | None = None) -> Any:
    if result["receipt"] in os.environ.get("AGENTLOG_TEST_UNDO_FAILS", "").split(","):
        raise RuntimeError(f"void of {result['receipt']} refused")
    return service.void(result["receipt"], idempotency_key)


@engine.tool(side_effect=True, compensate=_void)
def charge(op: str, *, idempotency_key: str) -> dict[str, str]:
    return {"receipt": service.perform("charge", op, idempotency_key)}


@engine.agent(name="recovery:flow")
def flow(
    run: Any,
    order: str,
    n: int = 2,
    retry: bool = False,
    refuse: bool = False,
    confirm: bool = False,
) -> list[str]:
    look(order)
    if retry:
        flaky(order)
    receipts = [charge(f"{order}-{i}")["receipt"] for i in range(n)]
    run.checkpoint("charged")
    if refuse:
        reject(order)
    if confirm:
        run.ask("ship it?")
    return receipts


if __name__ == "__main__":
    observe.configure()
    url, run_id, data = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    r = Engine.open(url).run(flow, run_id=run_id, **data)
    print(json.dumps({"run_id": r.run_id, "status": r.status}))
