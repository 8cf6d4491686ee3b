"""An agent that writes to the fencing service (tests/agents/fencing.py, at
``$AGENTLOG_TEST_FENCING``) under a cross-agent lock, passing the lock's fence with
every write, for tests that run it in several processes and SIGKILL one.

``python -m tests.agents.lock_agents URL RUN_ID RESOURCE STEPS TTL`` starts a run and
prints its result; ``$AGENTLOG_TEST_LOCK_PAUSE`` seconds pass after each write (0 when
unset), the window a test kills the holder in. A recoverer finds the agent through the
import path the run recorded.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

import httpx

from engine import Engine

engine = Engine.open()


@engine.tool(side_effect=True)
def fenced_write(
    resource: str, fence: int, holder: str, step: int, *, idempotency_key: str
) -> dict[str, Any]:
    """One write, carrying the fence; the service answers 409 to a stale fence."""
    body = {
        "resource": resource,
        "fence": fence,
        "holder": holder,
        "step": step,
        "key": idempotency_key,
    }
    r = httpx.post(os.environ["AGENTLOG_TEST_FENCING"] + "/write", json=body, timeout=10.0)
    return {"ok": r.status_code == 200, "status": r.status_code}


@engine.agent
def writer(run: Any, resource: str, steps: int, ttl: float) -> dict[str, Any]:
    accepted = []
    with run.lock(resource, ttl=ttl) as fence:
        for step in range(steps):
            accepted.append(fenced_write(resource, fence, run.run_id, step)["ok"])
            time.sleep(float(os.environ.get("AGENTLOG_TEST_LOCK_PAUSE", "0")))
    return {"fence": fence, "accepted": accepted}


if __name__ == "__main__":
    url, run_id, resource, steps, ttl = sys.argv[1:6]
    r = Engine.open(url).run(
        writer, run_id=run_id, resource=resource, steps=int(steps), ttl=float(ttl)
    )
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))
