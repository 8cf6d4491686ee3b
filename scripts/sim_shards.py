#!/usr/bin/env python
"""Simulate a log partitioned by run id: N shards on the local PostgreSQL, writers spread
by hash(run_id), aggregate durable calls per second against one shard, in the same run.

Each shard is a schema of its own in one database (``?schema=``): its own tables, so its
own append lock and its own global position, as a shard on a server of its own would
have; but all shards share this server's CPU, its WAL and its one fsync stream, which
separate servers would not. So the figure isolates what partitioning removes (writers
queueing on one table lock) and says nothing of what more hardware would add.

``--writers`` processes each execute ``--runs`` runs of ``--calls`` keyed side-effecting
calls (benchkit.worker_agents.steps). A run goes to shard ``crc32(run_id) % N`` (stable
across processes and restarts, unlike Python's ``hash``). The writers open their engines
and then wait on a barrier file, so process start-up and store opening are not timed; the
rate is all calls over (last writer done - barrier released). Shard counts are run in
alternating order over ``--repeat`` rounds; the medians are reported.

Usage::

    python scripts/sim_shards.py                       # 8 writers; 1, 2, 4, 8 shards
    python scripts/sim_shards.py --writers 4 --shards 1,4 --repeat 1 --no-write
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from benchkit import PG_URL, alternating, drop_schemas, write_table

HERE = Path(__file__).resolve().parent
DOC = HERE.parent / "docs" / "bench_shards.md"
# One writer process: opens an engine per shard, waits for the barrier, runs its runs.
WRITER = """
import json, os, sys, time, uuid, zlib
sys.path.insert(0, os.environ["BENCH_HERE"])
from benchkit.worker_agents import steps
from engine import Engine
urls, runs, calls, go = json.loads(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
ids = [f"{os.getpid()}-{i}-{uuid.uuid4().hex[:8]}" for i in range(runs)]
home = {rid: zlib.crc32(rid.encode()) % len(urls) for rid in ids}
shards = {i: Engine(urls[i]) for i in sorted(set(home.values()))}  # only the shards it writes
for e in shards.values():
    e.store.runs()  # opened before the clock starts
print("ready", flush=True)
while not os.path.exists(go):
    time.sleep(0.001)
for rid in ids:
    r = shards[home[rid]].run(steps, run_id=rid, order=rid, calls=calls)
    assert r.status == "completed", r
counts = [sum(1 for rid in ids if home[rid] == i) for i in range(len(urls))]
print(json.dumps({"done": time.time(), "per_shard": counts}), flush=True)
for e in shards.values():
    e.close()
"""


def shard_urls(n: int, schemas: list[str]) -> list[str]:
    tag = uuid.uuid4().hex[:6]
    names = [f"sim_shard_{tag}_{i}" for i in range(n)]
    schemas.extend(names)
    sep = "&" if "?" in PG_URL else "?"
    # one connection per shard engine (two at most): N shards x W writers stay within
    # the server's max_connections, which other work on this machine shares
    return [f"{PG_URL}{sep}schema={name}&pool_size=1&max_overflow=1" for name in names]


def one_round(urls: list[str], writers: int, runs: int, calls: int) -> dict[str, float]:
    """Aggregate calls per second of ``writers`` processes over the shards ``urls``."""
    for url in urls:  # the schema made before the writers race to make it
        subprocess.run(
            [
                sys.executable,
                "-c",
                "import sys; from engine import Engine; Engine(sys.argv[1]).store.runs()",
                url,
            ],
            check=True,
        )
    go = os.path.join(tempfile.mkdtemp(prefix="sim-shards-"), "go")
    env = {**os.environ, "BENCH_HERE": str(HERE), "AGENTLOG_LOG_LEVEL": "error"}
    argv = [sys.executable, "-c", WRITER, json.dumps(urls), str(runs), str(calls), go]
    procs = [
        subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True) for _ in range(writers)
    ]
    for p in procs:
        assert p.stdout is not None and p.stdout.readline().strip() == "ready"
    start = time.time()
    Path(go).touch()
    reports = []
    for p in procs:
        out, _ = p.communicate(timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"a writer failed ({p.returncode})")
        reports.append(json.loads(out.strip().splitlines()[-1]))
    elapsed = max(r["done"] for r in reports) - start
    spread = [sum(r["per_shard"][i] for r in reports) for i in range(len(urls))]
    return {"rate": writers * runs * calls / elapsed, "elapsed": elapsed, "busiest": max(spread)}


def measure(args: argparse.Namespace, schemas: list[str]) -> dict[tuple[int, int], list[float]]:
    """(shards, writers) -> the rate of each round; one writer on one shard as the unit."""
    cells = [(1, 1), *((n, args.writers) for n in args.shards)]
    rates: dict[tuple[int, int], list[float]] = {cell: [] for cell in cells}
    for r in range(args.repeat):
        for shards, writers in alternating(cells, r):
            got = one_round(shard_urls(shards, schemas), writers, args.runs, args.calls)
            rates[(shards, writers)].append(got["rate"])
            print(
                f"round {r}: {shards} shard(s), {writers} writer(s): {got['rate']:.0f} calls/s "
                f"({got['elapsed']:.2f} s; busiest shard {got['busiest']} runs)",
                flush=True,
            )
    return rates


def table(rates: dict[tuple[int, int], list[float]], writers: int) -> list[str]:
    unit = statistics.median(rates[(1, 1)])
    one_shard = statistics.median(rates[(1, writers)]) if (1, writers) in rates else None
    lines = [
        "| shards | writers | calls/s (median) | x 1 writer, 1 shard | x 1 shard, same writers |",
        "|---:|---:|---:|---:|---:|",
    ]
    for (shards, n), values in rates.items():
        rate = statistics.median(values)
        same = f"{rate / one_shard:.2f}" if one_shard and n == writers else "-"
        lines.append(f"| {shards} | {n} | {rate:.0f} | {rate / unit:.2f} | {same} |")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--writers", type=int, default=8)
    p.add_argument("--shards", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4, 8])
    p.add_argument("--runs", type=int, default=4, help="runs per writer (default 4)")
    p.add_argument("--calls", type=int, default=25, help="keyed calls per run (default 25)")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--no-write", action="store_true", help="print only")
    args = p.parse_args()
    schemas: list[str] = []
    started = time.perf_counter()
    try:
        rates = measure(args, schemas)
    finally:
        drop_schemas(PG_URL, schemas)
    lines = table(rates, args.writers)
    lines += [
        "",
        f"Command: `python scripts/sim_shards.py --writers {args.writers} --shards "
        f"{','.join(map(str, args.shards))} --runs {args.runs} --calls {args.calls} "
        f"--repeat {args.repeat}`; {os.cpu_count()} cores, shared; "
        f"{time.perf_counter() - started:.0f} s in all.",
    ]
    print("\n".join(lines))
    if not args.no_write:
        write_table(str(DOC), "Shards on one PostgreSQL server (simulation)", __doc__, lines)


if __name__ == "__main__":
    main()
