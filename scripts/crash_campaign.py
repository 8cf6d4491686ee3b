#!/usr/bin/env python
"""Crash campaign: kill agent processes with SIGKILL, resume them, count the damage.

Runs tests/agents/campaign_agent.py (side effects of every kind: business and default
keys, with and without verifiers, with and without idempotency keys) and, with
``--agent async`` or ``mix`` (the default), tests/agents/async_campaign_agent.py (async
tools issued concurrently with ``asyncio.gather``, finishing in reverse order, and an
async decision) against a fake outside service that counts every execution per
operation in its own SQLite file. Each step of a run (start, resume, recover, answer,
abandon) is a fresh child process; the parent kills children with SIGKILL at random
moments (a timer) and at every failpoint (``AGENTLOG_FAILPOINTS``: after_intent,
after_tool, after_outcome, in_snapshot, in_compensation), and continues the run (killing
some of those steps too) until it completes or, for one round in three, is abandoned
(compensations run). A run whose owner was killed is continued by ``resume`` or, for a
share of steps (``--recover-share``), by ``engine.recover()`` in another process, which
must find the dead owner by its lease and take the run over. A run paused because nobody
can tell whether an effect happened is answered truthfully: the parent asks the fake
service whether the effect is there.

The same rounds run once more, uncrashed, in the parent (memory store, its own service
file). The report compares the two: duplicated effects, lost effects and final-state
mismatches (status, output, the service's books) must all be 0.

    python scripts/crash_campaign.py --kills 1000 --store sqlite
    python scripts/crash_campaign.py --kills 300 --agent async --recover-share 0.5
    python scripts/crash_campaign.py --kills 200 --store postgres --url postgresql://...

``--workload tree`` runs trees of runs instead (campaign/tree.py): a root, its
branches and their leaves (child runs) with business-keyed effects, a lock around a
write that an outside service checks by its fencing token, messages between sibling
branches and durable sleeps; kills land in roots, children and grandchildren, inside
the lock and inside a sleep (failpoints ``campaign_in_lock`` and ``campaign_in_sleep``
besides the engine's), and trees are continued by ``engine.recover()``, ``agentlog
recover`` and ``resume`` in fresh processes. Duplicated and lost messages and two
holders of one lock are counted too.

    python scripts/crash_campaign.py --workload tree --kills 1000 --store postgres

``--agent model`` runs an agent of model calls instead (campaign/models.py): every
operation a decision returning a pydantic model from a real local model server (in this
process, called with ``httpx``) that answers some requests with 429 (retried under the
decision's RetryPolicy), the tool the plan names, and a streamed summary (``run.stream``,
60-100 chunks); kills land at ``after_decision`` and halfway through a stream
(``campaign_mid_stream``) besides the others. Model calls made again for a decision the
log records (duplicated decisions) and values the agent got of the wrong type or value,
live or replayed (mismatched values), are counted too.

    python scripts/crash_campaign.py --agent model --kills 300 --store postgres

``--workload saga`` runs supervised teams (campaign/saga.py) whose siblings have
effects, restarted under one_for_all and rest_for_one by a breaker that fails, and
compensating rewinds of finished teams; ``--workload forks`` (campaign/forks.py)
rewinds senders before their send, receivers before their receive and lock holders
inside their lock block. Both book every effect at a real HTTP ledger in this process
(campaign/ledger.py) that counts each per key: 0 duplicated, 0 lost.
``--store-loss SHARE`` (any workload) makes that share of steps lose the store
connection between an effect and its outcome (campaign/storeloss.py).

    python scripts/crash_campaign.py --workload saga --kills 300 --store postgres
    python scripts/crash_campaign.py --workload forks --kills 300 --store-loss 0.2

The seed is printed at start (stderr) and in the report; ``--seed N`` or
``AGENTLOG_CAMPAIGN_SEED=N`` repeats a campaign's choices.

Exit status: 0 all clear, 1 damage found (or too few kills), 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from urllib.parse import parse_qsl, urlsplit

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # engine and tests.agents, installed or not

from campaign.child import child  # noqa: E402 - the package imports engine: ROOT first
from campaign.forks import ForksCampaign  # noqa: E402
from campaign.launchers import zygote  # noqa: E402
from campaign.models import ModelCampaign  # noqa: E402
from campaign.report import Report  # noqa: E402
from campaign.rounds import Campaign  # noqa: E402
from campaign.saga import SagaCampaign  # noqa: E402
from campaign.tree import TreeCampaign  # noqa: E402

STORE_LOSS = "share of steps that lose the store between an effect and its outcome (any workload)"
SEED_ENV = "AGENTLOG_CAMPAIGN_SEED"  # fixes the seed when --seed is not given
DEFAULT_PG = os.environ.get(
    "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentlog_test"
)


def _pg_schema_url(base: str, schema: str) -> str:
    sep = "&" if "?" in base else "?"
    return f"{base}{sep}schema={schema}"


def _drop_schema(url: str) -> None:
    import psycopg

    schema = dict(parse_qsl(urlsplit(url).query)).get("schema")
    if schema and schema != "public":
        with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _seed_from_env() -> int | None:
    """``$AGENTLOG_CAMPAIGN_SEED`` if set (None, reported, when it is not an integer),
    else a fresh random seed."""
    raw = os.environ.get(SEED_ENV, "").strip()
    if not raw:
        return random.randrange(1 << 30)
    try:
        return int(raw)
    except ValueError:
        print(f"crash_campaign: {SEED_ENV}={raw!r} is not an integer", file=sys.stderr)
        return None


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kills", type=int, default=200, help="SIGKILLs to deliver (at least)")
    p.add_argument(
        "--store", default="sqlite", help="sqlite or postgres (memory is not allowed: it dies)"
    )
    p.add_argument("--url", help="the store URL (default: a fresh file / a fresh schema)")
    p.add_argument(
        "--seed",
        type=int,
        default=None,
        help=f"the random seed (default ${SEED_ENV}, else random; printed at start)",
    )
    p.add_argument("--ops", type=int, default=16, help="side-effecting operations per run")
    p.add_argument("--max-seconds", type=float, default=None, help="stop early (reported)")
    p.add_argument("--workdir", help="where the service books (and SQLite store) go")
    p.add_argument(
        "--launcher",
        choices=("fork", "spawn"),
        default="fork",
        help="fork children from a preloaded zygote (fast) or spawn a new interpreter each",
    )
    p.add_argument(
        "--agent",
        choices=("sync", "async", "mix", "model"),
        default="mix",
        help="the campaign agent: sync, async (gathered async tools), mix (pairs alternate), "
        "or model (decisions that stream, return pydantic models and hit 429s)",
    )
    p.add_argument(
        "--workload",
        choices=("flat", "tree", "saga", "forks"),
        default="flat",
        help="flat: one run at a time (--agent); tree: run trees (root, branches, leaves) "
        "with locks, messages and sleeps; saga: supervised teams restarting siblings with "
        "effects, and compensating rewinds; forks: rewinds of senders, receivers and lock "
        "holders",
    )
    p.add_argument("--store-loss", type=float, default=0.0, metavar="SHARE", help=STORE_LOSS)
    p.add_argument(
        "--tree-shape",
        default="3,2,2",
        help="the tree workload's WIDTH,LEAVES,OPS: branches, leaves per branch, effects per "
        "leaf before its sleep",
    )
    p.add_argument(
        "--recover-share",
        type=float,
        default=0.3,
        help="share of steps after a kill taken by engine.recover() instead of resume",
    )
    p.add_argument("--keep", action="store_true", help="keep the store and books")
    p.add_argument("--json", action="store_true", help="the report as JSON on stdout")
    p.add_argument("-v", "--verbose", action="store_true", help="every launch on stderr")
    return p.parse_args(argv)


def usage_error(a: argparse.Namespace) -> str | None:
    """What is wrong with the options argparse cannot check, or None."""
    store = a.store.lower()
    if store.startswith("memory") or (a.url or "").startswith("memory"):
        return "a memory store dies with its process; use sqlite or postgres"
    if store not in ("sqlite", "postgres", "postgresql"):
        return f"unknown store {a.store!r} (sqlite, postgres)"
    if not 0.0 <= a.recover_share <= 1.0:
        return "--recover-share must be between 0 and 1"
    if not 0.0 <= a.store_loss < 1.0:
        return "--store-loss must be at least 0 and below 1"
    if a.kills < 1 or a.ops < 1:
        return "--kills and --ops must be positive"
    if tree_shape(a.tree_shape) is None:
        return f"--tree-shape is WIDTH,LEAVES,OPS, positive, WIDTH 2 or more: {a.tree_shape!r}"
    return None


def tree_shape(text: str) -> tuple[int, int, int] | None:
    """``WIDTH,LEAVES,OPS`` as three positive integers (a branch needs a sibling: WIDTH
    at least 2), or None."""
    parts = text.split(",")
    if len(parts) != 3 or not all(p.strip().isdigit() for p in parts):
        return None
    width, leaves, ops = (int(p) for p in parts)
    return (width, leaves, ops) if width >= 2 and leaves >= 1 and ops >= 1 else None


def store_url(a: argparse.Namespace, seed: int, workdir: Path) -> tuple[str, bool]:
    """The campaign's store URL, and whether it names a fresh schema (dropped afterwards)."""
    if a.url:
        return a.url, False
    if a.store.lower() == "sqlite":
        return f"sqlite:///{workdir / 'campaign.db'}", False
    return _pg_schema_url(DEFAULT_PG, f"campaign_{seed}_{uuid.uuid4().hex[:6]}"), True


def run(a: argparse.Namespace, seed: int) -> Report:
    """The campaign the options describe, then its clean-up (unless ``--keep``)."""
    workdir = Path(a.workdir or tempfile.mkdtemp(prefix="agentlog-campaign-"))
    workdir.mkdir(parents=True, exist_ok=True)
    url, fresh_schema = store_url(a, seed, workdir)
    campaign: Campaign
    if a.workload == "tree":
        shape = tree_shape(a.tree_shape)
        assert shape is not None  # usage_error said so
        campaign = TreeCampaign(url, workdir, seed, a.verbose, a.launcher, a.recover_share, shape)
    elif a.workload in ("saga", "forks"):
        kind = SagaCampaign if a.workload == "saga" else ForksCampaign
        campaign = kind(url, workdir, seed, a.verbose, a.launcher, a.recover_share)
    elif a.agent == "model":
        campaign = ModelCampaign(url, workdir, seed, a.ops, a.verbose, a.launcher, a.recover_share)
    else:
        campaign = Campaign(
            url, workdir, seed, a.ops, a.verbose, a.launcher, a.agent, a.recover_share
        )
    campaign.store_loss = a.store_loss
    try:
        return campaign.run(a.kills, a.max_seconds)
    finally:
        campaign.close()
        clean_up(a, url, fresh_schema, workdir)


def clean_up(a: argparse.Namespace, url: str, fresh_schema: bool, workdir: Path) -> None:
    """Drop the campaign's fresh schema and its own workdir, unless ``--keep``."""
    if not a.keep:
        if fresh_schema:
            _drop_schema(url)
        if not a.workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--child"]:
        return child(argv[1:])
    if argv[:1] == ["--zygote"]:
        return zygote()
    a = parse_args(argv)
    error = usage_error(a)
    if error:
        print(f"crash_campaign: {error}", file=sys.stderr)
        return 2
    seed = a.seed if a.seed is not None else _seed_from_env()
    if seed is None:
        return 2
    print(
        f"crash_campaign: seed {seed} (repeat with --seed {seed} or {SEED_ENV}={seed})",
        file=sys.stderr,
        flush=True,
    )
    report = run(a, seed)
    if report.kills < a.kills:
        report.anomalies.append(f"only {report.kills} of {a.kills} kills delivered")
    result = report.as_dict()
    if a.json:
        print(json.dumps(result))
    else:
        for k, v in result.items():
            print(f"{k:24} {v}")
    return 0 if report.clean else 1


if __name__ == "__main__":
    sys.exit(main())
