"""Agents that schedules start, for the schedule tests (imported by workers and the CLI
as ``tests.agents.schedule_agents``).

``report(run, team)`` returns what it reported; ``tick(run, note="")`` returns its run
id, the one run of one tick. ``serve()`` runs a worker of the store at ``$AGENTLOG_URL``
(``python -c "from tests.agents.schedule_agents import serve; serve()"``): it prints
``ready <epoch>`` once its store is open, then works until SIGTERM (a drain) or SIGKILL.
"""

from __future__ import annotations

import signal
import time
from typing import Any

from engine import Engine

engine = Engine.open()


@engine.agent
def report(run: Any, team: str = "ops") -> dict[str, str]:
    return {"team": team}


@engine.agent
def tick(run: Any, note: str = "") -> str:
    return str(run.run_id)


@engine.agent
def keyed(run: Any, api_key: str = "") -> bool:
    return bool(api_key)


def serve(concurrency: int = 4) -> None:
    worker = engine.worker(concurrency=concurrency, grace=5.0)
    signal.signal(signal.SIGTERM, lambda *_: worker.stop())
    engine.store.max_global_position()  # the store open (its tables made) before "ready"
    print("ready", time.time(), flush=True)
    worker.run()
