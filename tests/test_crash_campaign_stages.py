"""The saga and forks crash campaigns and ``--store-loss``, CI-sized (a few SIGKILLs per
store, SQLite and PostgreSQL), each judged by a real HTTP ledger that books every effect
per key: supervised teams restarting siblings with effects and a compensating rewind of
a finished team; rewinds of a sender, a receiver and a lock holder; steps that lose the
store between an effect and its outcome. No duplicated or lost effect, message or lock
holder, no final-state mismatch, no anomaly. ``scripts/crash_campaign.py --workload
saga|forks --kills 300`` is the full-size run."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import backends
from test_crash_campaign_tree import ROOT, SCRIPT
from test_crash_campaign_tree import ZEROS as TREE_ZEROS

ZEROS = (*TREE_ZEROS, "hung_steps")


def _campaign(store_url: str, tmp_path: Path, *args: str) -> tuple[dict[str, Any], str]:
    """Run the campaign script (bounded by its kills, not by a clock): its report and a
    line that repeats it."""
    seed = int(os.environ.get("AGENTLOG_CAMPAIGN_SEED") or random.randrange(1 << 30))
    store = "postgres" if store_url.startswith("postgres") else "sqlite"
    cmd = [
        *(sys.executable, str(SCRIPT), *args, "--store", store, "--url", store_url),
        *("--seed", str(seed), "--workdir", str(tmp_path), "--json"),
    ]
    p = subprocess.run(cmd, cwd=str(ROOT), capture_output=True, text=True)
    again = f"AGENTLOG_CAMPAIGN_SEED={seed}"
    assert p.stdout.strip(), f"{again}: {p.stderr[-3000:]}"
    report = json.loads(p.stdout.strip().splitlines()[-1])
    context = f"{again}: {report}"
    assert p.returncode == 0, context
    for count in ZEROS:  # the flat workload counts no messages nor locks
        assert report.get(count, 0) == 0, f"{count}: {context}"
    assert report["anomalies"] == [], context
    return report, context


@pytest.mark.slow
@backends("sqlite", "postgres")
def test_saga_campaign_restarts_siblings_and_rewinds_without_damage(
    store_url: str, tmp_path: Path
) -> None:
    """2+ kills of supervised teams: the supervisor restarted siblings that had paid (the
    refunds counted), the first team was rewound with --effects compensate and its fork
    completed, and every note and charge stands once."""
    report, context = _campaign(store_url, tmp_path, "--workload", "saga", "--kills", "2")
    assert report["kills"] >= 2, context
    assert report["supervisor_restarts"] > 0 and report["refunded_effects"] > 0, context
    assert report["compensating_rewinds"] >= 1, context
    assert report["completed"] == report["rounds"] > 0, context


@pytest.mark.slow
@backends("sqlite", "postgres")
def test_forks_campaign_rewinds_senders_receivers_and_holders_without_damage(
    store_url: str, tmp_path: Path
) -> None:
    """3+ kills: a sender, a receiver and a lock holder each rewound (reuse) and their forks
    completed; one message, each effect once, no two holders of the lock."""
    report, context = _campaign(store_url, tmp_path, "--workload", "forks", "--kills", "3")
    assert report["kills"] >= 3, context
    assert report["reusing_rewinds"] >= 3, context
    assert report["completed"] == report["rounds"] > 0, context


@pytest.mark.slow
@backends("sqlite", "postgres")
def test_store_loss_between_effect_and_outcome_leaves_no_damage(
    store_url: str, tmp_path: Path
) -> None:
    """The mix workload, most steps losing the store when a tool returns (PostgreSQL: the
    step's backends terminated; SQLite: its outcome write fails): the runs stopped, were
    resumed, and no effect was made twice or lost; every round ended as its uncrashed
    twin did."""
    report, context = _campaign(
        store_url, tmp_path, "--kills", "2", "--ops", "4", "--store-loss", "0.6"
    )
    assert report["store_losses"] > 0 and report["stopped_by_store_loss"] > 0, context
    assert report["completed"] + report["abandoned"] == report["rounds"] > 0, context


def test_store_loss_share_is_checked() -> None:
    """--store-loss is a share below 1: anything else exits 2 naming the option."""
    p = subprocess.run(
        [sys.executable, str(SCRIPT), "--store-loss", "1.5", "--kills", "1"],
        cwd=str(ROOT),
        capture_output=True,
        text=True,
    )
    assert p.returncode == 2 and "--store-loss" in p.stderr
