"""The crash campaign's model workload, CI-sized: at least 30 SIGKILLs per store (SQLite
and PostgreSQL) of processes running an agent whose decisions return pydantic models
through a real ``httpx`` client from a local model server that answers some requests
with 429 (the decisions retry them), whose summaries stream 60-100 chunks, between
side-effecting tools with business and default keys. Kills land after a model call
returned and before its decision was recorded, halfway through a stream, and at random
moments. No decision is asked of the model again once recorded, every value the agent
gets (live or replayed) is a ``Plan`` equal to the model's or the whole streamed text,
and no effect is duplicated or lost. ``scripts/crash_campaign.py --agent model --kills
300`` is the full-size run (docs/campaign_models.md)."""

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
POINTS = {"after_decision", "campaign_mid_stream", "after_intent", "after_tool", "timer"}
ZEROS = (
    "duplicated_effects",
    "lost_effects",
    "final_state_mismatches",
    "duplicated_decisions",
    "mismatched_values",
)


def _campaign(*args: str) -> subprocess.CompletedProcess[str]:
    """Run the campaign script; bounded by its kills, not by a clock."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's engine in the children
    cmd = [sys.executable, str(SCRIPT), *args]
    return subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True, env=env)


@pytest.mark.slow
@backends("sqlite", "postgres")
def test_model_campaign_of_30_kills_leaves_no_damage(store_url: str, tmp_path: Path) -> None:
    """30+ kills of the model agent: every round ends as its uncrashed twin did (status,
    output, calls, token counts), 0 duplicated or lost effects, 0 model calls for a
    recorded decision, 0 values of the wrong type or value live or replayed; 429s were
    answered and retried, streams were cut by kills and asked for again whole."""
    seed = int(os.environ.get("AGENTLOG_CAMPAIGN_SEED") or random.randrange(1 << 30))
    store = "postgres" if store_url.startswith("postgres") else "sqlite"
    p = _campaign(
        *("--agent", "model", "--kills", "30", "--ops", "6", "--store", store),
        *("--url", store_url, "--seed", str(seed), "--workdir", str(tmp_path), "--json"),
    )
    again = f"AGENTLOG_CAMPAIGN_SEED={seed}"
    assert p.stdout.strip(), f"{again}: {p.stderr[-3000:]}"
    report = json.loads(p.stdout.strip().splitlines()[-1])
    context = f"{again}: {report}"
    assert p.returncode == 0, context
    assert report["kills"] >= 30, context
    for count in ZEROS:
        assert report[count] == 0, f"{count}: {context}"
    assert report["anomalies"] == [], context
    assert set(report["kills_by"]) >= POINTS, context
    assert report["rate_limited_429"].get("campaign", 0) > 0, context
    assert report["typed_checks"].get("replayed", 0) > 0, context
    assert report["typed_checks"].get("live", 0) > 0, context
    assert report["streams_cut_then_completed"] > 0, context
    assert report["completed"] > 0 and report["abandoned"] > 0, context
    assert set(report["rounds_by_agent"]) == {"model"}, context
