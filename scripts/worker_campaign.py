#!/usr/bin/env python
"""Worker campaign: a queue of runs served by worker processes killed and restarted at
random, and stopped past their lease then continued; nobody calls recover
(campaign/workers.py says what the runs do and what is counted).

    python scripts/worker_campaign.py --runs 200 --kills 50 --store sqlite
    python scripts/worker_campaign.py --runs 200 --kills 50 --store postgres --url postgresql://...

Reports runs completed, duplicated and lost effects and messages, and the time from a
worker's death (or stop) to its runs continuing in another worker (median, p95). The
seed is printed at start (stderr); ``--seed N`` or ``AGENTLOG_CAMPAIGN_SEED=N`` repeats
a campaign's choices (not the processes' timing).

Exit status: 0 all clear, 1 damage found (or fewer kills than asked), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # engine, installed or not

from campaign.workers import Plan, WorkerCampaign  # noqa: E402 - ROOT first
from crash_campaign import DEFAULT_PG, _pg_schema_url, _seed_from_env, clean_up  # noqa: E402


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=20, help="runs enqueued")
    p.add_argument("--kills", type=int, default=5, help="worker processes SIGKILLed")
    p.add_argument("--stops", type=int, default=None, help="SIGSTOPs (default kills/5, >= 1)")
    p.add_argument("--workers", type=int, default=3, help="worker processes at once")
    p.add_argument("--concurrency", type=int, default=4, help="runs per worker at once")
    p.add_argument("--lease-ttl", type=float, default=2.0, help="seconds (AGENTLOG_LEASE_TTL)")
    p.add_argument("--store", default="sqlite", help="sqlite or postgres")
    p.add_argument("--url", help="the store URL (default: a fresh file / a fresh schema)")
    p.add_argument("--seed", type=int, default=None, help="the random seed")
    p.add_argument("--max-seconds", type=float, default=900.0, help="give up (reported)")
    p.add_argument("--workdir", help="where the SQLite store and the workers' stderr go")
    p.add_argument("--keep", action="store_true", help="keep the store and the workdir")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="each kill on stderr")
    return p.parse_args(argv)


def usage_error(a: argparse.Namespace) -> str | None:
    if a.store.lower() not in ("sqlite", "postgres", "postgresql"):
        return f"unknown store {a.store!r} (sqlite, postgres)"
    if a.runs < 1 or a.kills < 0 or a.workers < 2 or a.concurrency < 1:
        return "--runs and --concurrency must be positive, --workers at least 2"
    if (a.stops is not None and a.stops < 0) or not a.lease_ttl > 0:
        return "--stops must be >= 0 and --lease-ttl above 0"
    return None


def main(argv: list[str] | None = None) -> int:
    a = parse_args(sys.argv[1:] if argv is None else argv)
    error = usage_error(a)
    seed = a.seed if a.seed is not None else _seed_from_env()
    if error or seed is None:
        print(f"worker_campaign: {error or 'bad seed'}", file=sys.stderr)
        return 2
    print(f"worker_campaign: seed {seed} (repeat with --seed {seed})", file=sys.stderr, flush=True)
    stops = a.stops if a.stops is not None else max(1, a.kills // 5)
    plan = Plan(a.runs, a.kills, stops, a.workers, a.concurrency, a.lease_ttl, a.max_seconds)
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="agentlog-wcamp-"))
    workdir.mkdir(parents=True, exist_ok=True)
    fresh = not a.url and a.store.lower() != "sqlite"
    url = a.url or (
        f"sqlite:///{workdir / 'campaign.db'}"
        if not fresh
        else _pg_schema_url(DEFAULT_PG, f"wcamp_{seed}_{uuid.uuid4().hex[:6]}")
    )
    campaign = WorkerCampaign(url, workdir, seed, plan, a.verbose)
    try:
        report = campaign.run()
    finally:
        campaign.close()
        clean_up(a, url, fresh, workdir)
    if report.kills < plan.kills:
        report.anomalies.append(f"only {report.kills} of {plan.kills} kills delivered")
    result = report.as_dict()
    print(json.dumps(result) if a.json else "\n".join(f"{k:24} {v}" for k, v in result.items()))
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
