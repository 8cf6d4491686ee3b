"""Many writers on one store: aggregate durable calls per second against raw commits per second.

A durable call is a keyed side-effecting tool call through the real engine
(``@engine.tool(side_effect=True)`` taking ``idempotency_key``), made by agents of
``--run-calls`` calls each, run after run. Each row runs 1, 2, 4, 8, 16 writer PROCESSES
(one run at a time each) on one PostgreSQL database and on one SQLite file, and 16
concurrent runs in ONE process (16 threads on one engine: SQLite's group commit) on one
SQLite file. Beside each, the same count of writers making raw one-row commits: sqlite3
(WAL, synchronous=FULL, one fsync'd commit each) and psycopg (autocommit INSERTs).
Writers are started and warmed up once per configuration; each round every writer of it
loops for ``--seconds``; a row's figure is the median over ``--rounds`` rounds, agentlog
and raw in alternating order within the same run.

    python scripts/bench_writers.py --rounds 5 --seconds 3 --out docs/bench_writers.md
    python scripts/bench_writers.py --rounds 5 --seconds 1 --writers 1,8 --stores postgres

Targets (issue 24): 8 PostgreSQL writers at least 3x one writer; 16 concurrent runs on one
SQLite file at least 5x the raw one-fsync-per-commit rate (one raw sqlite3 writer).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from benchkit import PG_URL, alternating, drop_schemas, write_table
from benchkit.writers import create_raw_table, serve

HERE = os.path.dirname(os.path.abspath(__file__))


@dataclass
class Config:
    """One row's side: ``kind`` of writer, where, ``procs`` processes x ``threads``."""

    kind: str  # engine | sqlite | pg
    where: str
    procs: int
    threads: int = 1
    schema: str = ""
    rates: list[float] = field(default_factory=list)
    per_commit: list[float] = field(default_factory=list)  # engine: appends per COMMIT


@contextmanager
def pool(c: Config, run_calls: int) -> Iterator[list[subprocess.Popen[str]]]:
    """The writer processes of ``c``, each ready (set up and warmed)."""
    cmd = [sys.executable, os.path.abspath(__file__), "--serve", c.kind, c.where]
    cmd += [str(c.threads), str(run_calls), c.schema or "-"]
    env = {**os.environ, "PYTHONPATH": HERE}
    procs = [
        subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        for _ in range(c.procs)
    ]
    try:
        for p in procs:
            assert p.stdout is not None and p.stdout.readline().strip() == "ready"
        yield procs
    finally:
        for p in procs:
            if p.stdin is not None:
                p.stdin.close()
        for p in procs:
            p.wait(60)


def measure(c: Config, procs: list[subprocess.Popen[str]], seconds: float) -> None:
    """One round: every writer loops ``seconds`` from one start; aggregate per second."""
    start = time.time() + 0.2
    for p in procs:
        assert p.stdin is not None
        p.stdin.write(f"go {start} {seconds}\n")
        p.stdin.flush()
    calls, end, appends, commits = 0, start, 0, 0
    for p in procs:
        assert p.stdout is not None
        words = p.stdout.readline().split()
        calls += int(words[0])
        end = max(end, float(words[1]))
        if len(words) == 4:
            appends, commits = appends + int(words[2]), commits + int(words[3])
    c.rates.append(calls / (end - start))
    if commits:
        c.per_commit.append(appends / commits)


def pair(store: str, procs: int, threads: int, tmp: str, pg_base: str) -> tuple[Config, Config]:
    """agentlog's writers and the raw ones, each on a fresh file or schema."""
    name = f"w{procs}x{threads}"
    if store == "sqlite":
        raw = f"{tmp}/{name}-raw.db"
        create_raw_table("sqlite", raw)
        return (
            Config("engine", f"sqlite:///{tmp}/{name}.db", procs, threads),
            Config("sqlite", raw, procs, threads),
        )
    schema = f"bench_writers_{uuid.uuid4().hex[:8]}"
    create_raw_table("pg", pg_base, schema)
    return (
        Config("engine", f"{pg_base}?schema={schema}_e", procs, threads, f"{schema}_e"),
        Config("pg", pg_base, procs, threads, schema),
    )


def row(store: str, e: Config, r: Config, base: dict[str, float]) -> str:
    """One table row; ``base`` keeps each store's one-writer figures (its first row)."""
    em, rm = statistics.median(e.rates), statistics.median(r.rates)
    if e.procs == 1 and e.threads == 1:
        base[store], base[store + " raw"] = em, rm
    who = f"{e.procs} process(es)" if e.threads == 1 else f"{e.threads} threads, 1 process"
    batch = f"{statistics.median(e.per_commit):.1f}" if e.per_commit else ""
    one, raw_one = base.get(store, em), base.get(store + " raw", rm)
    return (
        f"| {store} | {who} | {em:.0f} | {rm:.0f} | {em / rm:.2f}x | {em / one:.2f}x | "
        f"{em / raw_one:.2f}x | {batch} |"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--writers", default="1,2,4,8,16", help="writer process counts")
    p.add_argument("--threads", type=int, default=16, help="concurrent runs in one process")
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--run-calls", type=int, default=50, help="keyed calls per agent run")
    p.add_argument("--pg-url", default=PG_URL)
    p.add_argument("--out", help="also write the table (Markdown) to this file")
    p.add_argument("--serve", nargs=5, help=argparse.SUPPRESS)  # a writer process
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        kind, where, threads, run_calls, schema = args.serve
        serve(kind, where, int(threads), int(run_calls), schema)
        return 0
    tmp = tempfile.mkdtemp(prefix="agentlog-bench-writers-")
    pg_base = args.pg_url.split("?")[0]
    shapes = [(n, 1) for n in map(int, args.writers.split(","))]
    plan = [(s, n, t) for s in args.stores.split(",") for n, t in shapes]
    if "sqlite" in args.stores.split(",") and args.threads > 1:
        plan.append(("sqlite", 1, args.threads))
    lines = [
        f"Aggregate durable calls per second (medians of {args.rounds} rounds x "
        f"{args.seconds:g} s; {args.run_calls} keyed calls per run). Command: `python "
        f"scripts/bench_writers.py --rounds {args.rounds} --seconds {args.seconds:g} "
        f"--writers {args.writers} --stores {args.stores}`",
        "",
        "| store | writers | agentlog calls/s | raw commits/s | agentlog / raw | "
        "vs 1 agentlog writer | vs 1 raw writer | appends per COMMIT |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    base: dict[str, float] = {}
    schemas: list[str] = []
    try:
        for store, procs, threads in plan:
            e, r = pair(store, procs, threads, tmp, pg_base)
            schemas += [c.schema for c in (e, r) if c.schema]
            with pool(e, args.run_calls) as ep, pool(r, args.run_calls) as rp:
                for k in range(args.rounds):
                    for c, ps in alternating([(e, ep), (r, rp)], k):
                        measure(c, ps, args.seconds)
            lines.append(row(store, e, r, base))
            print(lines[-1], flush=True)
    finally:
        if schemas:
            drop_schemas(pg_base, schemas)
    print("\n" + "\n".join(lines))
    if args.out:
        write_table(args.out, "Writers benchmark", __doc__, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
