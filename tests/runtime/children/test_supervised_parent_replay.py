"""A supervised parent killed between recording a child's failure and answering it (its
one_for_all supervisor was still stopping the running sibling) replays that recorded
failure through ``run.spawn(...)`` and ``run.gather`` back into its supervisor when
resumed: the restart is carried out and the team completes, instead of the replay
raising the old failure as ChildFailed. A real process, SIGKILLed, on SQLite and
PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents.kit import ROOT, wait_until
from agents.supervised_agents import attempts
from conftest import backends

from engine import Engine
from engine.log.history import run_stream

TREE = backends("sqlite", "postgres")
MODULE = "tests.agents.supervised_agents"


def _data(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


def _failure_recorded(eng: Engine, run_id: str) -> bool:
    if eng.store.last_position(run_stream(run_id)) == 0:
        return False  # not started yet
    return any(d["status"] == "failed" for d in _data(eng, run_id, "child_finished"))


def _kill_mid_restart(eng: Engine, url: str, run_id: str, directory: Path) -> None:
    """Run the team in a process of its own and SIGKILL it once the parent has recorded
    its child's failure (the restart cannot record anything while the holder holds)."""
    (directory / "hold").touch()
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    cmd = [sys.executable, "-m", MODULE, url, run_id, str(directory)]
    with subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE) as p:
        try:
            wait_until(lambda: _failure_recorded(eng, run_id), "the child's failure", 60)
        finally:
            p.send_signal(signal.SIGKILL)
            p.wait()
    (directory / "hold").unlink()


@TREE
def test_a_supervised_parent_killed_before_its_restart_finishes_it_on_resume(
    eng: Engine, store_url: str, tmp_path: Path
) -> None:
    _kill_mid_restart(eng, store_url, "team", tmp_path)
    [failed] = [d for d in _data(eng, "team", "child_finished") if d["status"] == "failed"]
    assert _data(eng, "team", "child_restarted") == []  # the failure is not answered yet
    assert eng.state("team").status == "running"  # its owner died

    result = eng.resume("team")
    assert (result.status, result.output) == ("completed", ["held read", "try 2"])
    assert attempts(str(tmp_path), "breaker") == 2
    restarted = {d["previous_run_id"] for d in _data(eng, "team", "child_restarted")}
    assert failed["child_run_id"] in restarted and len(restarted) == 2  # both siblings
    eng.verify("team")
