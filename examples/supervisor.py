"""A supervisor and three workers: one worker crashes on its first attempt, the
supervisor restarts it (one_for_one: the failed child resumes from its log, its done
work is not redone), and the team completes. Ends with the run tree, as
``agentlog tree RUN`` prints it.

    python examples/supervisor.py            # a SQLite file in a temporary directory
    AGENTLOG_URL=postgresql://... python examples/supervisor.py
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

from _store import engine_for

from engine import Supervisor

engine = engine_for("supervisor")
crashes = {"flaky": 1}  # the flaky worker crashes once, in this process
work_done: list[tuple[str, int]] = []  # every time the tool really ran


@engine.tool
def square(worker: str, item: int) -> int:
    """The workers' unit of work (a recorded call: a restarted worker does not redo it)."""
    work_done.append((worker, item))
    return item * item


@engine.agent
def worker(run: Any, name: str, items: list[int]) -> dict[str, Any]:
    total = sum(square(name, i) for i in items)
    if crashes.get(name, 0) > 0:
        crashes[name] -= 1
        raise RuntimeError(f"worker {name} crashed")  # the run fails; its parent restarts it
    return {"worker": name, "total": total}


@engine.agent(supervise=Supervisor(strategy="one_for_one", max_restarts=3, within=60.0))
def team(run: Any, jobs: dict[str, list[int]]) -> dict[str, int]:
    workers = [run.spawn(worker, name=name, items=items) for name, items in jobs.items()]
    return {out["worker"]: out["total"] for out in run.gather(*workers)}


def tree(run_id: str) -> str:
    """``agentlog tree RUN``, run as the command it is."""
    cmd = [sys.executable, "-m", "replay", "tree", run_id]
    done = subprocess.run(cmd, capture_output=True, text=True, env=os.environ.copy())
    return done.stdout + done.stderr


def main() -> int:
    jobs = {"steady": [1, 2, 3], "flaky": [4, 5], "quick": [6]}
    result = engine.run(team, jobs=jobs)
    print(f"team {result.run_id}: {result.status} {result.output}")
    for e in engine.events(result.run_id):
        if e.type in ("child_spawned", "child_restarted", "child_finished"):
            d = e.data
            why = f" ({d['strategy']}: {d['reason']})" if e.type == "child_restarted" else ""
            print(f"  {e.type:16} {d['child_run_id']}{why}")
    print(f"tool calls made: {len(work_done)} (6 items: none redone by the restart)")
    print(tree(result.run_id), end="")
    engine.close()
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
