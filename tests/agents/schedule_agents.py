"""Agents that schedules start, for the schedule tests (imported by workers and the CLI
as ``tests.agents.schedule_agents``).

``report(run, team)`` returns what it reported; ``tick(run, note="")`` returns its run
id, the one run of one tick.
"""

from __future__ import annotations

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
