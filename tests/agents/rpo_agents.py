"""Agents with a recovery point objective, for the tests that SIGKILL a run mid-way.

``python -m tests.agents.rpo_agents URL RUN_ID N AGENT`` runs AGENT (``by_calls``:
``rpo=5``; ``unbounded``: no rpo) over ``N`` reads and SIGKILLs its own process right
after call ``$AGENTLOG_TEST_KILL_AT`` returned (its events committed).
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any

from engine import Engine

engine = Engine.open()


@engine.tool
def step(i: int) -> int:
    return i * 2


def _steps(n: int) -> int:
    kill_at = int(os.environ.get("AGENTLOG_TEST_KILL_AT", "0"))
    total = 0
    for i in range(1, n + 1):
        total += step(i)
        if i == kill_at:
            os.kill(os.getpid(), signal.SIGKILL)
    return total


@engine.agent(rpo=5)
def by_calls(run: Any, n: int) -> int:
    return _steps(n)


@engine.agent
def unbounded(run: Any, n: int) -> int:
    return _steps(n)


if __name__ == "__main__":
    url, run_id, n, name = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    agent = {"by_calls": by_calls, "unbounded": unbounded}[name]
    Engine.open(url).run(agent, run_id=run_id, n=n)
