"""Agents whose side-effecting tools post with httpx to the loopback service named by
``$AGENTLOG_TEST_HTTP`` (tests/agents/loopback.py), for tests that SIGKILL the process.

``python -m tests.agents.http_agents URL RUN_ID AGENT ORDER`` starts a run; a resumer
finds the agent through the import path the run recorded.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import httpx

from engine import Engine

engine = Engine.open()


def _post(order: str, key: str | None) -> Any:
    headers = {"Idempotency-Key": key} if key else {}
    url = os.environ["AGENTLOG_TEST_HTTP"] + "/charge"
    r = httpx.post(url, json={"order": order}, headers=headers, timeout=10.0)
    r.raise_for_status()
    return r.json()


def _lookup(key: str) -> Any:
    r = httpx.get(os.environ["AGENTLOG_TEST_HTTP"] + f"/effects/{key}", timeout=10.0)
    return r.json() if r.status_code == 200 else None


@engine.tool(side_effect=True)
def charge_plain(order: str) -> Any:
    """No verifier, no key: an uncertain charge is asked of a person."""
    return _post(order, None)


@engine.tool(side_effect=True)
def charge_keyed(order: str, *, idempotency_key: str) -> Any:
    """Takes the key and sends it: an uncertain charge is re-sent under the same key."""
    return _post(order, idempotency_key)


@engine.tool(side_effect=True, key=lambda order: f"charge:{order}", verify=_lookup)
def charge_verified(order: str) -> Any:
    """A business key sent as the header, and a verifier that asks the service."""
    return _post(order, f"charge:{order}")


@engine.agent
def pay(run: Any, order: str, how: str) -> Any:
    tool = {"plain": charge_plain, "keyed": charge_keyed, "verified": charge_verified}[how]
    return tool(order)


if __name__ == "__main__":
    url, run_id, order, how = sys.argv[1:5]
    r = Engine.open(url).run(pay, run_id=run_id, order=order, how=how)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))
