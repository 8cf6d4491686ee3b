"""The two-hosts test's agent: keyed side effects against the counting service (its URL
in ``AGENTLOG_EFFECTS_URL``), each followed by a slow read, so a cut can land anywhere."""

from __future__ import annotations

import json
import os
import time
import urllib.request
from typing import Any

from engine import Engine

engine = Engine()


@engine.tool(side_effect=True, key=lambda step: f"step-{step}", timeout=20.0)
def effect(step: int, idempotency_key: str = "") -> int:
    """Book step ``step`` under its key; the service performs a key once."""
    body = json.dumps({"key": idempotency_key, "step": step}).encode()
    url = os.environ["AGENTLOG_EFFECTS_URL"] + "/do"
    with urllib.request.urlopen(urllib.request.Request(url, body), timeout=15) as r:
        return int(json.loads(r.read())["performed"])


@engine.tool
def pause(seconds: float) -> float:
    time.sleep(seconds)
    return seconds


@engine.agent
def job(run: Any, steps: int, gap: float) -> int:
    done = 0
    for step in range(steps):
        effect(step)
        pause(gap)
        done += 1
    return done
