"""``agentlog worker --version V`` in a real process: it executes the queued runs of
version V and leaves the others queued; ``runs --version`` lists each side."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

from conftest import backends
from test_cli_kit import Workdir, clean_env

from engine.polling import poll_until

AGENTS = """
from engine import Engine

engine = Engine.open()


@engine.agent(version="1")
def old(run):
    return "old code"


@engine.agent(version="2")
def new(run):
    return "new code"
"""


@backends("sqlite")
def test_a_worker_of_version_2_runs_version_2_and_leaves_version_1_queued(
    tmp_path: Path, store_url: str
) -> None:
    (tmp_path / "versioned.py").write_text(AGENTS)
    w = Workdir(tmp_path, store_url)
    one = w.ok("enqueue", "versioned:old", "--run-id", "one").out.strip()
    two = w.ok("enqueue", "versioned:new", "--run-id", "two").out.strip()
    cmd = [sys.executable, "-m", "replay.cli", "worker", "--import", "versioned"]
    cmd += ["--version", "2", "--grace", "5", "--url", w.url]
    proc = subprocess.Popen(
        cmd, cwd=w.path, env=clean_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        done = w.cli("wait", two, "--timeout", "60", "--json")
        assert done.code == 0 and done.json()["output"] == "new code", done
        assert poll_until(lambda: w.ok("workers", "--json").json() != [], 30)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "(version 2)" in out
    queued = w.ok("runs", "--version", "1", "--json").json()
    assert [(r["run_id"], r["status"], r["version"]) for r in queued] == [(one, "queued", "1")]
