"""What an RPO costs: per-call time of one run with ``rpo=1``, ``rpo=20``, ``rpo="0.1s"``
and none (the default cadence of 100 events), on SQLite and PostgreSQL, with the
snapshots each stores and the largest tail a recovery could have folded (the widest gap
between snapshots, or from the last one to the head, in events).

    python scripts/bench_rpo.py        # rewrites the block in docs/bench_snapshots.md
    python scripts/bench_rpo.py --stores sqlite --calls 200 --repeat 3 --no-write

Each round runs every policy once, in alternating order (benchkit.alternating); the
table gives medians over the rounds and each policy's ratio to "none" in the same run.
"""

from __future__ import annotations

import argparse
import datetime as dt
import itertools
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from benchkit import PG_URL, alternating, drop_schemas, write_block

from engine import Engine
from engine.log.history import rebuild, run_stream

DOC = Path(__file__).resolve().parents[1] / "docs" / "bench_snapshots.md"
POLICIES: dict[str, Any] = {"none": None, "rpo=20": 20, 'rpo="0.1s"': "0.1s", "rpo=1": 1}


def _url(kind: str, tmp: Path, schemas: list[str]) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tmp}/{uuid.uuid4().hex[:8]}.db"
    schema = f"bench_rpo_{uuid.uuid4().hex[:8]}"
    schemas.append(schema)
    return f"{PG_URL}{'&' if '?' in PG_URL else '?'}schema={schema}"


def one_run(url: str, rpo: Any, calls: int) -> tuple[float, int, int]:
    """Seconds for ``calls`` recorded reads in one run, its snapshots, its widest gap."""
    eng = Engine.open(url)
    try:

        @eng.tool
        def step(i: int) -> int:
            return i

        @eng.agent(rpo=rpo, name="bench")
        def bench(run: Any, n: int) -> int:
            return sum(step(i) for i in range(n))

        eng.run(bench, n=3)  # warm: schema, statements, imports
        began = time.perf_counter()
        r = eng.run(bench, n=calls)
        took = time.perf_counter() - began
        marks = sorted(s.position for s in eng.store.snapshots(run_stream(r.run_id), None))
        ends = [0, *marks, rebuild(eng.store, r.run_id).position]
        return took, len(marks), max(b - a for a, b in itertools.pairwise(ends))
    finally:
        eng.close()


def measure(kind: str, calls: int, repeat: int, tmp: Path) -> list[str]:
    schemas: list[str] = []
    times: dict[str, list[float]] = {p: [] for p in POLICIES}
    shape: dict[str, tuple[int, int]] = {}  # snapshots, widest gap
    try:
        for round_ in range(repeat):
            for name in alternating(list(POLICIES), round_):
                took, snaps, gap = one_run(_url(kind, tmp, schemas), POLICIES[name], calls)
                times[name].append(took)
                shape[name] = (snaps, gap)
    finally:
        drop_schemas(PG_URL.split("?")[0], schemas)
    base = statistics.median(times["none"])
    rows = []
    for name, xs in times.items():
        per_ms = statistics.median(xs) * 1000 / calls
        snaps, gap = shape[name]
        ratio = statistics.median(xs) / base
        rows.append(f"| {kind} | `{name}` | {per_ms:.3f} | {ratio:.2f} | {snaps} | {gap} |")
    return rows


def report(rows: list[str], calls: int, repeat: int, took: float) -> str:
    when = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    return "\n".join(
        [
            f"Command: `python scripts/bench_rpo.py --calls {calls} --repeat {repeat}`  ",
            f"Date: {when}  ",
            f"Machine: 2 cores, shared; {platform.system()} {platform.machine()}, Python "
            f"{platform.python_version()}, SQLite {sqlite3.sqlite_version}; total {took:.0f} s",
            "",
            f"One run of {calls} recorded reads (a commit each); medians of {repeat} rounds.",
            "",
            "| store | policy | ms per call | x none (same run) | snapshots | widest tail |",
            "|---|---|---:|---:|---:|---:|",
            *rows,
            "",
        ]
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--calls", type=int, default=400)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    start = time.perf_counter()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_rpo_") as tmp:
        for kind in args.stores.split(","):
            rows += measure(kind, args.calls, args.repeat, Path(tmp))
            print(f"  {kind} done", file=sys.stderr)
    body = report(rows, args.calls, args.repeat, time.perf_counter() - start)
    print(body)
    if not args.no_write:
        write_block(str(DOC), "bench_rpo", body)
    return 0


if __name__ == "__main__":
    sys.exit(main())
