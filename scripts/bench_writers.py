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
and raw in alternating order within the same run. Columns: "agentlog / raw" is over the
same count of raw writers; "vs 1 agentlog writer" and "vs 1 raw writer" are over one writer
of each kind, kept running and measured again in the same rounds as the row; "appends per
COMMIT" is SQLite's group commit counting (engine writers; 1.0: no batching). The row
"group commit off" is the same 16 threads with the batch held to one append.

    python scripts/bench_writers.py --rounds 5 --seconds 3 --out docs/bench_writers.md
    python scripts/bench_writers.py --rounds 5 --seconds 1 --writers 1,8 --stores postgres

Targets (issue 24): 8 PostgreSQL writers at least 3x one writer; 16 concurrent runs on one
SQLite file at least 5x the raw one-fsync-per-commit rate (one raw sqlite3 writer).
"""

from __future__ import annotations

import argparse
import contextlib
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


def pair(
    store: str, procs: int, threads: int, tmp: str, pg_base: str, tag: str
) -> tuple[Config, Config]:
    """agentlog's writers and the raw ones, each on a fresh file or schema."""
    name = f"{tag}{procs}x{threads}"
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


def row(e: Config, r: Config, one: tuple[Config, Config], note: str = "") -> str:
    """One table row; ``one`` is the store's one-writer pair, measured in the same rounds."""
    em, rm = statistics.median(e.rates), statistics.median(r.rates)
    one_e, one_r = statistics.median(one[0].rates), statistics.median(one[1].rates)
    store = "sqlite" if e.where.startswith("sqlite") else "postgres"
    who = f"{e.procs} process(es)" if e.threads == 1 else f"{e.threads} threads, 1 process"
    who += f", {note}" if note else ""
    batch = f"{statistics.median(e.per_commit):.1f}" if e.per_commit else ""
    spread = f"{min(e.rates):.0f}-{max(e.rates):.0f}"
    return (
        f"| {store} | {who} | {em:.0f} | {spread} | {rm:.0f} | {em / rm:.2f}x | "
        f"{em / one_e:.2f}x | {em / one_r:.2f}x | {batch} |"
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


def store_rows(store: str, args: argparse.Namespace, tmp: str, schemas: list[str]) -> list[str]:
    """The rows of one store. Beside each row's pair, the one-writer pair (kept running)
    is measured again in the same rounds, so each ratio compares figures of one moment."""
    pg_base = args.pg_url.split("?")[0]
    shapes = [(n, 1) for n in map(int, args.writers.split(","))]
    if store == "sqlite" and args.threads > 1:
        shapes.append((1, args.threads))
    one = pair(store, 1, 1, tmp, pg_base, "one")
    schemas += [c.schema for c in one if c.schema]
    lines = []
    with pool(one[0], args.run_calls) as p1, pool(one[1], args.run_calls) as p2:
        for procs, threads in shapes:
            e, r = pair(store, procs, threads, tmp, pg_base, "row")
            schemas += [c.schema for c in (e, r) if c.schema]
            alone = (procs, threads) == (1, 1)  # this row is the one-writer pair itself
            # many runs in one process: the same again with one append per COMMIT
            off = Config("engine-alone", f"sqlite:///{tmp}/off.db", 1, threads)
            own = [e, r] + ([off] if threads > 1 else [])
            for c in one:
                c.rates.clear()
            with contextlib.ExitStack() as stack:
                sides = [(c, stack.enter_context(pool(c, args.run_calls))) for c in own]
                sides += [] if alone else [(one[0], p1), (one[1], p2)]
                for k in range(args.rounds):
                    for c, ps in alternating(sides, k):
                        measure(c, ps, args.seconds)
            lines.append(row(e, r, (e, r) if alone else one))
            if threads > 1:
                lines.append(row(off, r, one, "one append per COMMIT (group commit off)"))
            print("\n".join(lines[-1 - (threads > 1) :]), flush=True)
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.serve:
        kind, where, threads, run_calls, schema = args.serve
        serve(kind, where, int(threads), int(run_calls), schema)
        return 0
    tmp = tempfile.mkdtemp(prefix="agentlog-bench-writers-")
    load = os.getloadavg()[0]
    lines = [
        f"Aggregate durable calls per second (medians of {args.rounds} rounds x "
        f"{args.seconds:g} s; {args.run_calls} keyed calls per run). Command: `python "
        f"scripts/bench_writers.py --rounds {args.rounds} --seconds {args.seconds:g} "
        f"--writers {args.writers} --stores {args.stores}`",
        "",
        "| store | writers | agentlog calls/s | its rounds' range | raw commits/s | "
        "agentlog / raw | vs 1 agentlog writer | vs 1 raw writer | appends per COMMIT |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    schemas: list[str] = []
    try:
        for store in args.stores.split(","):
            lines += store_rows(store, args, tmp, schemas)
    finally:
        if schemas:
            drop_schemas(args.pg_url.split("?")[0], schemas)
    lines += [
        "",
        f"Machine: {os.cpu_count()} cores shared with other jobs; load average "
        f"{load:.1f} at the start, {os.getloadavg()[0]:.1f} at the end: the figures are noisy.",
    ]
    print("\n" + "\n".join(lines))
    if args.out:
        write_table(args.out, "Writers benchmark", __doc__, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
