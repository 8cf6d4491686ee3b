"""The crash campaign over run trees, CI-sized: at least 20 SIGKILLs per store (SQLite
and PostgreSQL) of processes running a root, its branches and their leaves, at random
moments and at every failpoint (while a branch holds the order's lock, while a leaf
sleeps), trees continued by ``engine.recover()``, ``agentlog recover`` and ``resume``
in fresh processes: no duplicated or lost effect, no duplicated or lost message, never
two holders of one lock, no final state that differs from an uncrashed tree.
``scripts/crash_campaign.py --workload tree --kills 1000`` is the full-size run."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import backends

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "crash_campaign.py"
POINTS = {  # the engine's, the messages', and the workload's inside its lock
    *("after_intent", "after_tool", "after_outcome", "in_snapshot"),
    *("after_send", "after_recv", "campaign_in_lock"),
}
IN_SLEEP = {"in_sleep", "campaign_in_sleep"}  # at its start, halfway: either will do
ZEROS = (
    "duplicated_effects",
    "lost_effects",
    "duplicated_messages",
    "lost_messages",
    "two_lock_holders",
    "final_state_mismatches",
)


def _campaign(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the campaign script; bounded by its kills, not by a clock."""
    cmd = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True)


@pytest.mark.slow
@backends("sqlite", "postgres")
def test_tree_campaign_of_20_kills_leaves_no_damage(store_url: str, tmp_path: Path) -> None:
    """20+ kills of trees: every tree completes as its uncrashed twin did, every count
    of damage is 0, the kills reached every failpoint named above and interrupted roots,
    children, grandchildren, a lock's holder and a sleeper, and the trees were continued
    by all three recoverers."""
    seed = int(os.environ.get("AGENTLOG_CAMPAIGN_SEED") or random.randrange(1 << 30))
    store = "postgres" if store_url.startswith("postgres") else "sqlite"
    p = _campaign(
        *("--workload", "tree", "--kills", "20", "--store", store, "--url", store_url),
        *("--seed", str(seed), "--workdir", str(tmp_path), "--json"),
    )
    again = f"AGENTLOG_CAMPAIGN_SEED={seed}"
    assert p.stdout.strip(), f"{again}: {p.stderr[-3000:]}"
    report = json.loads(p.stdout.strip().splitlines()[-1])
    context = f"{again}: {report}"
    assert p.returncode == 0, context
    assert report["kills"] >= 20, context
    for count in ZEROS:
        assert report[count] == 0, f"{count}: {context}"
    assert report["anomalies"] == [], context
    assert set(report["kills_by"]) >= POINTS | {"timer"}, context
    assert set(report["kills_by"]) & IN_SLEEP, context
    interrupted = set(report["kills_interrupting"])
    assert interrupted >= {"root", "child", "grandchild", "holding_lock", "sleeping"}, context
    assert report["completed"] == report["rounds"] > 0, context
    for step in ("recover-all", "cli-recover", "resume"):
        assert report["launches_by"].get(step, 0) > 0, f"{step}: {context}"


def test_tree_campaign_refuses_an_unknown_workload() -> None:
    """--workload is flat or tree: anything else exits 2 naming the option."""
    p = _campaign("--workload", "forest", "--kills", "1")
    assert p.returncode == 2 and "--workload" in p.stderr
