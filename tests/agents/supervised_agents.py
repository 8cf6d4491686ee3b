"""A supervised team for tests that SIGKILL its process in the middle of a restart.

``python -m tests.agents.supervised_agents URL RUN_ID DIR`` runs ``team`` (one_for_all):
its child ``breaker`` fails its first attempt (attempts counted in DIR, across
processes) while its sibling ``holder`` reads in a tool that waits while ``DIR/hold``
exists. The restart must stop the running holder before it records anything, so the
parent waits there, its child's failure recorded and not yet answered, until killed.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from engine import Engine, Supervisor
from engine.polling import poll_until

engine = Engine.open()


def attempts(directory: str, name: str) -> int:
    """How many attempts ``name`` has made (its counter file in ``directory``)."""
    path = Path(directory, f"{name}.count")
    return int(path.read_text()) if path.exists() else 0


def _bump(directory: str, name: str) -> int:
    n = attempts(directory, name) + 1
    part = Path(directory, f"{name}.part")
    part.write_text(str(n))
    part.replace(Path(directory, f"{name}.count"))  # readers never see it half written
    return n


@engine.tool
def wait_out(directory: str) -> str:
    """A read that lasts while ``directory/hold`` exists."""
    poll_until(lambda: not Path(directory, "hold").exists(), None, first=0.01, most=0.01)
    return "read"


@engine.agent
def holder(run: Any, directory: str) -> str:
    return "held " + wait_out(directory)


@engine.agent
def breaker(run: Any, directory: str) -> str:
    n = _bump(directory, "breaker")
    if n == 1:
        raise RuntimeError("the first try broke")
    return f"try {n}"


@engine.agent(supervise=Supervisor("one_for_all", max_restarts=3, within=60.0))
def team(run: Any, directory: str) -> list[str]:
    kids = run.spawn(holder, directory=directory), run.spawn(breaker, directory=directory)
    return list(run.gather(*kids))


if __name__ == "__main__":
    url, run_id, directory = sys.argv[1:4]
    r = Engine.open(url).run(team, run_id=run_id, directory=directory)
    print(json.dumps({"run_id": r.run_id, "status": r.status, "output": r.output}))
