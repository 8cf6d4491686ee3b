"""The worker campaign, CI-sized, on SQLite and PostgreSQL: 20 runs served by three
worker processes, 5 of them SIGKILLed and restarted and one SIGSTOPped past its 2 s
lease, nobody calling recover. Every run completes; no effect or message is lost or
duplicated; every worker drains and exits 0. ``scripts/worker_campaign.py --runs 200
--kills 50`` is the full-size run."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import backends

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "worker_campaign.py"
ZEROS = (
    "duplicated_effects",
    "lost_effects",
    "duplicated_messages",
    "lost_messages",
    "final_state_mismatches",
)


@pytest.mark.slow
@backends("sqlite", "postgres")
def test_workers_killed_and_stopped_leave_no_damage(store_url: str, tmp_path: Path) -> None:
    seed = int(os.environ.get("AGENTLOG_CAMPAIGN_SEED") or random.randrange(1 << 30))
    store = "postgres" if store_url.startswith("postgres") else "sqlite"
    cmd = [
        *(sys.executable, str(SCRIPT), "--runs", "20", "--kills", "5", "--stops", "1"),
        *("--lease-ttl", "2", "--store", store, "--url", store_url, "--seed", str(seed)),
        *("--workdir", str(tmp_path), "--json"),
    ]
    p = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True)
    assert p.stdout.strip(), f"AGENTLOG_CAMPAIGN_SEED={seed}: {p.stderr[-3000:]}"
    report = json.loads(p.stdout.strip().splitlines()[-1])
    context = f"AGENTLOG_CAMPAIGN_SEED={seed}: {report}"
    assert p.returncode == 0, context
    for count in ZEROS:
        assert report[count] == 0, f"{count}: {context}"
    assert report["anomalies"] == [], context
    assert report["kills"] == 5 and report["worker_stops"] == 1, context
    assert report["completed"] == report["rounds"] == 20, context
    assert report["worker_exits"] == {"0": 3}, context
