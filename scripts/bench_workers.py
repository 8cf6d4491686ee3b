"""Workers side by side: aggregate durable calls per second with 1, 2, 4 and 8 worker
processes on one store, each ratio over one worker measured in the same run; and how
late a worker wakes a sleeping run after its timer is due.

Each configuration starts the worker processes (``agentlog worker``, concurrency
``--concurrency``), waits until all of them serve, enqueues ``--runs-per-worker`` runs per
worker of ``--calls`` keyed side-effecting calls each, and times from the first enqueue
to the last run's end. Medians over
``--repeat`` rounds, configurations in alternating order. The timer part enqueues
``--naps`` runs that ``run.sleep(2)`` with one worker running and reports how late each
woke (median, p95, max), as the run's own recorded clock tells it.

    python scripts/bench_workers.py --store sqlite --repeat 3
    python scripts/bench_workers.py --store postgres --repeat 3
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

from benchkit import PG_URL, alternating, drop_schemas, write_table

HERE = os.path.dirname(os.path.abspath(__file__))


def store_url(kind: str, schemas: list[str]) -> str:
    if kind == "sqlite":
        return f"sqlite:///{tempfile.mkdtemp(prefix='bench-workers-')}/w.db"
    schema = f"bench_workers_{uuid.uuid4().hex[:8]}"
    schemas.append(schema)
    sep = "&" if "?" in PG_URL else "?"
    return f"{PG_URL}{sep}schema={schema}"


@contextmanager
def workers(url: str, n: int, concurrency: int) -> Iterator[None]:
    env = {**os.environ, "PYTHONPATH": HERE, "AGENTLOG_URL": url, "AGENTLOG_LOG_LEVEL": "error"}
    cmd = [sys.executable, "-m", "replay", "worker", "--import", "benchkit.worker_agents"]
    cmd += ["--concurrency", str(concurrency), "--grace", "5"]
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL) for _ in range(n)]
    try:
        yield
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(30)


def throughput(kind: str, n: int, args: argparse.Namespace, schemas: list[str]) -> float:
    """Durable calls per second of ``n`` workers over a fresh store."""
    sys.path.insert(0, HERE)
    from benchkit import worker_agents as agents

    from engine import Engine

    url = store_url(kind, schemas)
    engine = Engine(url)
    runs = n * args.runs_per_worker
    with workers(url, n, args.concurrency):
        while len(engine.workers()) < n:  # started and serving: start-up is not measured
            time.sleep(0.05)
        began = time.perf_counter()
        handles = [
            engine.enqueue(agents.steps, order=f"o{i}", calls=args.calls) for i in range(runs)
        ]
        for h in handles:
            h.result(timeout=600)
        took = time.perf_counter() - began
    engine.close()
    return runs * args.calls / took


def lateness(kind: str, args: argparse.Namespace, schemas: list[str]) -> list[float]:
    sys.path.insert(0, HERE)
    from benchkit import worker_agents as agents

    from engine import Engine

    url = store_url(kind, schemas)
    engine = Engine(url)
    with workers(url, 1, args.concurrency):
        handles = [engine.enqueue(agents.nap, seconds=2.0) for _ in range(args.naps)]
        late = [float(h.result(timeout=600)) for h in handles]
    engine.close()
    return late


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--counts", default="1,2,4,8")
    p.add_argument("--runs-per-worker", type=int, default=8)
    p.add_argument("--calls", type=int, default=25)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--naps", type=int, default=20)
    p.add_argument("--out", default=None)
    args = p.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    schemas: list[str] = []
    seen: dict[int, list[float]] = {n: [] for n in counts}
    try:
        for r in range(args.repeat):
            for n in alternating(counts, r):
                seen[n].append(throughput(args.store, n, args, schemas))
                print(f"round {r + 1}: {n} workers {seen[n][-1]:.0f} calls/s", flush=True)
        late = sorted(lateness(args.store, args, schemas))
    finally:
        if schemas:
            drop_schemas(PG_URL, schemas)
    base = statistics.median(seen[counts[0]])
    lines = [
        f"Store: {args.store}; {args.runs_per_worker} runs per worker of {args.calls} keyed "
        f"side-effecting calls; worker concurrency {args.concurrency}; medians of "
        f"{args.repeat} rounds.",
        "",
        "| workers | calls/s (median) | ratio over 1 worker |",
        "|---:|---:|---:|",
    ]
    for n in counts:
        m = statistics.median(seen[n])
        lines.append(f"| {n} | {m:.0f} | {m / base:.2f} |")
    p95 = late[min(len(late) - 1, int(0.95 * len(late)))]
    lines += [
        "",
        f"Timer wake-up lateness, one worker, {len(late)} runs of run.sleep(2): median "
        f"{statistics.median(late) * 1000:.0f} ms, p95 {p95 * 1000:.0f} ms, "
        f"max {late[-1] * 1000:.0f} ms.",
    ]
    print("\n".join(lines))
    if args.out:
        write_table(args.out, f"Workers on {args.store}", __doc__, lines)


if __name__ == "__main__":
    main()
