"""scripts/bench_tree.py, small: a parent with a few children on PostgreSQL, SIGKILLed
once it has spawned them, finished by concurrent ``agentlog recover`` processes; the
script checks the parent's output and every child's completion, and reports its figures
(the full-size run, 200 children of 10 calls and 4 recoverers, is docs/bench_tree.md's)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "bench_tree.py"


@pytest.mark.postgres
@pytest.mark.slow
def test_bench_tree_finishes_a_killed_parent_with_concurrent_recoverers() -> None:
    """8 children of 3 calls, 3 recover processes: every round's tree completes right
    (the script raises otherwise), with events written by the recovery."""
    cmd = [sys.executable, str(SCRIPT), "--children", "8", "--calls", "3"]
    cmd += ["--processes", "3", "--rounds", "1", "--no-write", "--json"]
    p = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, timeout=900)
    assert p.returncode == 0, p.stderr[-3000:]
    (only,) = json.loads(p.stdout.strip().splitlines()[-1])
    assert only["events_recovered"] > 0 and only["batches"] >= 1, only
    assert only["events_total"] >= 8 * (2 + 2 * 3), only  # each child: start, calls, end


def test_bench_tree_refuses_a_store_that_is_not_postgresql() -> None:
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--url", "sqlite:///x.db", "--no-write"],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "PostgreSQL" in p.stderr
