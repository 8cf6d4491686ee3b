"""The engine's own cost per durable call, this checkout against a baseline checkout.

Each sample is a fresh process that runs an agent making ``--calls`` durable calls of one
kind and reports the CPU time (``time.process_time``) per call, so a busy machine slows
both sides alike instead of blurring wall-clock figures. Sides alternate, ``--rounds``
samples each; the table gives medians and the ratio this/baseline.

``--instructions`` counts instructions instead (valgrind's cachegrind: the difference
between runs of ``2 * calls`` and ``calls`` calls, divided by ``calls``): one sample per
side, unmoved by other load on the machine.

    git worktree add /tmp/before <commit>          # or: git archive <commit> | tar -x -C DIR
    python scripts/bench_overhead.py --baseline /tmp/before --rounds 7
    python scripts/bench_overhead.py --baseline /tmp/before --instructions --calls 500
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]
KINDS = ("read-only", "side-effect", "keyed")

SAMPLE = """
import json, sys, time
from engine import Engine
url, kind, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
engine = Engine(url)

@engine.tool
def look(i: int) -> int:
    return i

@engine.tool(side_effect=True)
def send(i: int) -> int:
    return i

@engine.tool(side_effect=True, key=lambda i: f"k:{i}")
def keyed(i: int) -> int:
    return i

tool = {"read-only": look, "side-effect": send, "keyed": keyed}[kind]

@engine.agent
def agent(run, n: int) -> int:
    for i in range(n):
        tool(i)
    return n

engine.run(agent, n=10)  # warm-up: imports, schema, first snapshot
if len(sys.argv) > 4:  # counted from outside: just make the calls
    engine.run(agent, n=n)
    raise SystemExit
started = time.process_time()
engine.run(agent, n=n)
print(json.dumps((time.process_time() - started) / n * 1e6))
engine.close()
"""


def sample(root: Path, url: str, kind: str, calls: int) -> float:
    """CPU microseconds per call of ``kind`` with the engine of checkout ``root``."""
    env = {**os.environ, "PYTHONPATH": str(root)}
    out = subprocess.run(
        [sys.executable, "-c", SAMPLE, url, kind, str(calls)],
        env=env,
        cwd=root,
        capture_output=True,
        text=True,
        check=True,
    )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


def instructions(root: Path, url: str, kind: str, calls: int) -> float:
    """Instructions per call of ``kind`` with the engine of checkout ``root``."""

    def count(n: int) -> int:
        env = {**os.environ, "PYTHONPATH": str(root)}
        valgrind = [
            "valgrind",
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
        ]
        out = subprocess.run(
            [*valgrind, sys.executable, "-c", SAMPLE, url, kind, str(n), "count"],
            env=env,
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        )
        line = next(ln for ln in out.stderr.splitlines() if "I   refs" in ln or "I refs" in ln)
        return int(line.split()[-1].replace(",", ""))

    return (count(2 * calls) - count(calls)) / calls


def measure(args: argparse.Namespace) -> dict[tuple[str, str, str], list[float]]:
    """Samples per (store, kind, side), sides alternating which goes first."""
    sides = {"baseline": Path(args.baseline).resolve(), "this": HERE}
    found: dict[tuple[str, str, str], list[float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for r in range(args.rounds):
            order = list(sides) if r % 2 == 0 else list(sides)[::-1]
            for store in args.stores.split(","):
                for kind in KINDS:
                    for side in order:
                        url = store_url(store, Path(tmp) / f"{side}-{kind}-{r}.db")
                        how = instructions if args.instructions else sample
                        value = how(sides[side], url, kind, args.calls)
                        found.setdefault((store, kind, side), []).append(value)
    return found


def store_url(store: str, path: Path) -> str:
    if store == "memory":
        return "memory://"
    if store == "sqlite":
        return f"sqlite:///{path}?synchronous=OFF"
    raise SystemExit(f"unknown store {store!r}: memory or sqlite")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", required=True, help="a checkout of the code to compare")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--stores", default="memory,sqlite")
    parser.add_argument("--instructions", action="store_true", help="count with cachegrind")
    args = parser.parse_args()
    if args.instructions:
        args.rounds = 1
    found = measure(args)
    unit = "instructions" if args.instructions else "µs"
    print(f"| store | call | baseline {unit}/call | this {unit}/call | this/baseline |")
    print("|---|---|---:|---:|---:|")
    for store in args.stores.split(","):
        for kind in KINDS:
            base = statistics.median(found[(store, kind, "baseline")])
            this = statistics.median(found[(store, kind, "this")])
            print(f"| {store} | {kind} | {base:,.1f} | {this:,.1f} | {this / base:.3f} |")


if __name__ == "__main__":
    main()
