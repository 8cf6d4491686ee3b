"""The crash campaign, CI-sized: at least 50 SIGKILLs per store (SQLite and PostgreSQL),
at random moments and at every failpoint, over the sync agent and the async one (gathered
async tools), runs continued by resume and by ``recover`` from another process, and no
duplicated effect, no lost effect, no final state that differs from an uncrashed run.
``scripts/crash_campaign.py --kills 1000`` is the full-size run."""

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
FAILPOINTS = {"after_intent", "after_tool", "after_outcome", "in_snapshot", "in_compensation"}


def _campaign(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run the campaign script; bounded by its kills, not by a clock."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), *args],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.slow
@backends("sqlite", "postgres")
def test_crash_campaign_of_50_kills_leaves_no_damage(store_url: str, tmp_path: Path) -> None:
    """50+ kills (timer and every failpoint, some during resumes, recoveries, answers and
    abandons), sync and async agents alternating, a third of the runs whose owner was
    killed taken over by engine.recover() in another process: every run completes or is
    abandoned as its uncrashed twin did, with 0 duplicated effects, 0 lost effects, 0
    final-state mismatches and no anomaly (recover never misses a dead owner)."""
    # $AGENTLOG_CAMPAIGN_SEED replays a failed CI campaign's choices; every failure names it.
    seed = int(os.environ.get("AGENTLOG_CAMPAIGN_SEED") or random.randrange(1 << 30))
    p = _campaign(
        "--kills",
        "50",
        "--store",
        "postgres" if store_url.startswith("postgres") else "sqlite",
        "--url",
        store_url,
        "--seed",
        str(seed),
        "--workdir",
        str(tmp_path),
        "--agent",
        "mix",
        "--recover-share",
        "0.35",
        "--json",
    )
    again = f"AGENTLOG_CAMPAIGN_SEED={seed}"
    assert p.stdout.strip(), f"{again}: {p.stderr[-3000:]}"
    report = json.loads(p.stdout.strip().splitlines()[-1])
    context = f"{again}: {report}"
    assert report["seed"] == seed, context
    assert p.returncode == 0, context
    assert report["kills"] >= 50, context
    assert set(report["kills_by"]) >= FAILPOINTS | {"timer"}, context
    assert report["duplicated_effects"] == 0, context
    assert report["lost_effects"] == 0, context
    assert report["final_state_mismatches"] == 0, context
    assert report["anomalies"] == [], context
    assert report["completed"] > 0 and report["abandoned"] > 0, context
    assert report["launches_by"].get("resume", 0) > 0, context
    assert report["launches_by"].get("recover", 0) > 0, context
    assert report["launches_by"].get("abandon", 0) > 0, context
    assert set(report["rounds_by_agent"]) == {"sync", "async"}, context


def test_crash_campaign_refuses_a_memory_store() -> None:
    """A memory store dies with the process it lives in: the campaign refuses it (exit 2)."""
    p = _campaign("--store", "memory", "--kills", "1")
    assert p.returncode == 2 and "memory" in p.stderr


def test_crash_campaign_refuses_a_bad_agent_or_recover_share() -> None:
    """--agent is sync, async or mix; --recover-share a fraction: anything else exits 2."""
    p = _campaign("--agent", "threaded", "--kills", "1")
    assert p.returncode == 2 and "--agent" in p.stderr
    p = _campaign("--recover-share", "1.5", "--kills", "1")
    assert p.returncode == 2 and "recover-share" in p.stderr


def test_crash_campaign_prints_its_seed_and_takes_it_from_the_environment(
    tmp_path: Path,
) -> None:
    """AGENTLOG_CAMPAIGN_SEED fixes the seed: printed at start, carried by the report; a
    seed that is not an integer exits 2 naming the variable."""
    p = _campaign(
        "--kills",
        "1",
        "--ops",
        "1",
        "--agent",
        "sync",
        "--workdir",
        str(tmp_path),
        "--json",
        env={"AGENTLOG_CAMPAIGN_SEED": "424242"},
    )
    assert p.returncode == 0, p.stderr[-3000:]
    assert p.stderr.splitlines()[0].startswith("crash_campaign: seed 424242")
    assert json.loads(p.stdout.strip().splitlines()[-1])["seed"] == 424242
    bad = _campaign("--kills", "1", env={"AGENTLOG_CAMPAIGN_SEED": "soon"})
    assert bad.returncode == 2 and "AGENTLOG_CAMPAIGN_SEED" in bad.stderr
