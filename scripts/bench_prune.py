"""Prune half of a store of ``--runs`` runs, on SQLite and PostgreSQL: the store's bytes
before and after (``engine.storage()``: payload bytes; and the database's own size: the
SQLite file after VACUUM, ``pg_total_relation_size`` of the schema's tables after VACUUM
FULL), the time the prune took, and a sample of the runs left verified and rewound.

Each run is an agent of three steps: a checkpoint, a keyed side-effecting tool call
(its business key in the ledger, kept 7 days: ``key_ttl``) and a read-only one with a
1 KB result. The first half
is made, then the second; the prune's clock stands 30 days after the cut between them.

    python scripts/bench_prune.py --runs 10000
    python scripts/bench_prune.py --runs 500 --only sqlite
"""

from __future__ import annotations

import argparse
import os
import sqlite3
import tempfile
import time
import uuid
from typing import Any

import psycopg

from engine import Engine, EngineConfig

PG = os.environ.get("AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres")
DAY = 86400.0


class Clock:
    def __init__(self) -> None:
        self.stopped: float | None = None

    def __call__(self) -> float:
        return time.time() if self.stopped is None else self.stopped


def _define(eng: Engine) -> Any:
    @eng.tool(side_effect=True, key=lambda order: f"bench:{order}")
    def charge(order: str) -> dict[str, str]:
        return {"order": order, "receipt": uuid.uuid4().hex}

    @eng.tool()
    def lookup(order: str) -> str:
        return os.urandom(512).hex()

    @eng.agent(name="bench:order")
    def order(run: Any, order: str) -> str:
        run.checkpoint("start")
        charge(order)
        return lookup(order)[:8]

    return order


def _database_bytes(url: str) -> int:
    if url.startswith("sqlite"):
        path = url.removeprefix("sqlite:///").split("?")[0]
        with sqlite3.connect(path) as conn:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("VACUUM")
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        return os.path.getsize(path)
    schema = url.split("schema=")[1]
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        tables = conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
        total = 0
        for (t,) in tables:
            conn.execute(f'VACUUM FULL "{schema}"."{t}"')
            row = conn.execute(f'SELECT pg_total_relation_size(\'"{schema}"."{t}"\')').fetchone()
            total += int(row[0]) if row else 0
        return total


def bench(url: str, runs: int) -> dict[str, Any]:
    clock = Clock()
    eng = Engine(url, config=EngineConfig(wall=clock, key_ttl=7 * DAY))
    try:
        agent = _define(eng)
        made = time.perf_counter()
        for i in range(runs // 2):
            eng.run(agent, order=f"old{i}")
        cut = time.time()
        kept = [eng.run(agent, order=f"new{i}").run_id for i in range(runs - runs // 2)]
        made = time.perf_counter() - made
        eng.stats()  # the views hold every run
        before, db_before = eng.storage()["total_bytes"], _database_bytes(url)
        clock.stopped = cut + 30 * DAY
        took = time.perf_counter()
        report = eng.prune(older_than="30d")
        took = time.perf_counter() - took
        eng.stats()  # the views rebuilt from the log left (the prune reset them)
        after, db_after = eng.storage()["total_bytes"], _database_bytes(url)
        sample = kept[:: max(1, len(kept) // 20)]
        for rid in sample:
            assert eng.verify(rid).status == "completed"
        assert eng.rewind(sample[0], to="start").status == "completed"
        stats = eng.stats()
        return {
            "runs": runs,
            "made_s": made,
            "pruned": report["runs"],
            "prune_s": took,
            "bytes_before": before,
            "bytes_after": after,
            "freed_reported": report["bytes_freed"],
            "db_before": db_before,
            "db_after": db_after,
            "left": stats.runs.total,
        }
    finally:
        eng.close()


def _row(name: str, r: dict[str, Any]) -> str:
    share = 1 - r["bytes_after"] / r["bytes_before"]
    db_share = 1 - r["db_after"] / r["db_before"]
    return (
        f"| {name} | {r['runs']} | {r['pruned']} | {r['prune_s']:.1f} s "
        f"({1000 * r['prune_s'] / max(1, r['pruned']):.1f} ms/run) | "
        f"{r['bytes_before']:,} -> {r['bytes_after']:,} (-{share:.0%}) | "
        f"{r['db_before']:,} -> {r['db_after']:,} (-{db_share:.0%}) | {r['left']} |"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--only", choices=("sqlite", "postgres"))
    args = parser.parse_args()
    print("| store | runs | pruned | prune took | payload bytes | database bytes | runs left |")
    print("|---|---|---|---|---|---|---|")
    if args.only in (None, "sqlite"):
        with tempfile.TemporaryDirectory() as d:
            print(_row("SQLite", bench(f"sqlite:///{d}/bench.db?synchronous=NORMAL", args.runs)))
    if args.only in (None, "postgres"):
        schema = f"bench_prune_{uuid.uuid4().hex[:8]}"
        sep = "&" if "?" in PG else "?"
        try:
            print(_row("PostgreSQL", bench(f"{PG}{sep}schema={schema}", args.runs)))
        finally:
            with psycopg.connect(PG.split("?")[0], autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


if __name__ == "__main__":
    main()
