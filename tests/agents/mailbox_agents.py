"""Agents for the tests of messages, timers and recover (tests/test_messages_*,
test_timers_*, test_recover_*), run in this process or in real ones that get killed.

``python -m tests.agents.mailbox_agents URL RUN_ID AGENT [JSON_INPUT]`` starts a run;
``$AGENTLOG_TEST_INLINE_WAIT`` sets the engine's ``inline_wait`` (default 30 seconds,
so a wait is waited out holding the thread, where a SIGKILL can find it).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from engine import Engine, observe
from engine.runtime.host.config import EngineConfig

engine = Engine.open()


@engine.agent
def sender(run: Any, to: str, topic: str = "go", value: Any = "hello") -> str:
    run.send(to, topic, value)
    return "sent"


@engine.agent
def secret_sender(run: Any, to: str, n: int) -> str:
    """A message with a secret-named entry (a secret the agent holds, never its input)."""
    run.send(to, "go", {"n": n, "password": "hunter2"})
    return "sent"


@engine.agent
def receiver(run: Any, topic: str = "go", n: int = 1, timeout: float | None = None) -> list[Any]:
    return [run.recv(topic, timeout=timeout) for _ in range(n)]


@engine.agent
def sleeper(run: Any, seconds: float) -> str:
    run.sleep(seconds)
    return "woke"


@engine.agent
async def async_waiter(run: Any, seconds: float, timeout: float) -> list[Any]:
    await run.sleep(seconds)
    got = await run.recv("go", timeout=timeout)
    return ["slept", got]


AGENTS = {"sender": sender, "receiver": receiver, "sleeper": sleeper}


def main(argv: list[str]) -> None:
    url, run_id, name = argv[:3]
    data = json.loads(argv[3]) if len(argv) > 3 else {}
    wait = float(os.environ.get("AGENTLOG_TEST_INLINE_WAIT", "30"))
    e = Engine.open(url, config=EngineConfig(inline_wait=wait))
    r = e.run(AGENTS[name], run_id=run_id, **data)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))


if __name__ == "__main__":
    observe.configure()
    main(sys.argv[1:])
