"""Encryption at rest: the cost per durable call with AGENTLOG_CIPHER_KEY on, against off.

Both variants run in the same process, on the same machine, back to back and in
alternating order: each store (SQLite with its default synchronous=FULL, PostgreSQL)
holds one database or schema encrypted (``?cipher=env``) and one in clear
(``?cipher=none``). A "call" is one tool call made durable: a read-only call is one
commit, a side-effecting one two (intent, then outcome). ``--payloads`` pads each
result to those sizes in bytes. "CPU" is this process's CPU time per call (where encryption is
spent; the wall time adds commits, fsync and the server, and other load on the machine).
"read" is reading the finished run's events back (``engine.events``), per event. Every
figure is the median over ``--repeat`` runs of ``--steps`` calls.

    pip install -e ".[crypto]"
    python scripts/bench_cipher.py --repeat 7 --steps 200
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchkit import PG_URL, alternating, drop_schemas, write_table

Sample = tuple[float, float, float]  # seconds per call (wall, CPU), per event read


def runner(url: str, side_effect: bool, payload: int) -> Callable[[int], Sample]:
    """Runs of ``steps`` durable calls of a tool whose result carries ``payload`` bytes."""
    from engine import Engine

    engine = Engine.open(url)
    pad = os.urandom(payload // 2 + 1).hex()[:payload]  # incompressible, as real data

    @engine.tool(side_effect=side_effect, name=f"bench_cipher_{side_effect}")
    def tool(i: int) -> dict[str, Any]:
        return {"i": i, "pad": pad}

    @engine.agent(name=f"bench:cipher_{side_effect}")
    def agent(run: Any, steps: int) -> int:
        return sum(tool(i)["i"] for i in range(steps))

    def go(steps: int) -> Sample:
        started, cpu = time.perf_counter(), time.process_time()
        result = engine.run(agent, steps=steps)
        ran, cpu = time.perf_counter() - started, time.process_time() - cpu
        assert result.status == "completed", result
        started = time.perf_counter()
        events = engine.events(result.run_id)
        read = time.perf_counter() - started
        return ran / steps, cpu / steps, read / len(events)

    return go


Key = tuple[str, str, int]  # store, call kind, result bytes
Variants = dict[str, Callable[[int], Sample]]  # by cipher: "none" (clear), "env"
SampleKey = tuple[str, str, int, str]  # the case's key and the cipher
Samples = dict[SampleKey, list[Sample]]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--repeat", type=int, default=7)
    p.add_argument("--payloads", default="100,16384", help="result sizes in bytes")
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--pg-url", default=PG_URL)
    p.add_argument("--out", help="also write the table (Markdown) to this file")
    return p.parse_args(argv)


def cases_of(args: argparse.Namespace, tmp: str, schemas: list[str]) -> dict[Key, Variants]:
    """Each (store, call kind, result size) with its clear and encrypted runner; the
    PostgreSQL schemas it makes are added to ``schemas``."""
    pg_base = args.pg_url.split("?")[0]

    def url(store: str, cipher: str) -> str:
        if store == "sqlite":
            return f"sqlite:///{tmp}/{cipher}.db?cipher={cipher}"
        schemas.append(f"bench_cipher_{cipher}_{uuid.uuid4().hex[:8]}")
        return f"{pg_base}?schema={schemas[-1]}&cipher={cipher}"

    cases: dict[Key, Variants] = {}
    for store in args.stores.split(","):
        urls = {cipher: url(store, cipher) for cipher in ("none", "env")}
        for kind in ("read-only", "side-effect"):
            for size in (int(s) for s in args.payloads.split(",")):
                cases[(store, kind, size)] = {
                    c: runner(u, kind == "side-effect", size) for c, u in urls.items()
                }
    return cases


def sample(cases: dict[Key, Variants], repeat: int, steps: int) -> Samples:
    """Samples by (store, kind, size, cipher): ``repeat`` runs, clear and encrypted back to
    back in alternating order."""
    for variants in cases.values():
        for go in variants.values():
            go(5)  # warm up: schemas, pools, imports
    samples: Samples = {}
    for r in range(repeat):
        for key, variants in cases.items():
            for cipher in alternating(list(variants), r):
                samples.setdefault((*key, cipher), []).append(variants[cipher](steps))
    return samples


def table(cases: dict[Key, Variants], samples: Samples, repeat: int, steps: int) -> list[str]:
    def med(key: SampleKey, i: int) -> float:
        return statistics.median(s[i] for s in samples[key]) * 1000

    def cells(off: SampleKey, on: SampleKey, i: int) -> str:
        a, b = med(off, i), med(on, i)
        digits = 4 if i == 2 else 3
        return f"{a:.{digits}f} | {b:.{digits}f} | {b / a:.2f}x"

    lines = [
        f"ms per durable call and per event read back (median of {repeat} runs x "
        f"{steps} calls; 2 cores, noisy). Command: `python scripts/bench_cipher.py "
        f"--repeat {repeat} --steps {steps}`",
        "",
        "| store | call | result bytes | ms/call clear | encrypted | ratio "
        "| CPU ms/call clear | encrypted | ratio | ms/event read clear | encrypted | ratio |",
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for store, kind, size in cases:
        off, on = (store, kind, size, "none"), (store, kind, size, "env")
        row = " | ".join(cells(off, on, i) for i in range(3))
        lines.append(f"| {store} | {kind} | {size} | {row} |")
    return lines


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if not os.environ.get("AGENTLOG_CIPHER_KEY"):
        from eventsourcing.cipher import AESCipher

        os.environ["AGENTLOG_CIPHER_KEY"] = AESCipher.create_key(32)
    tmp = tempfile.mkdtemp(prefix="agentlog-bench-cipher-")
    schemas: list[str] = []
    cases = cases_of(args, tmp, schemas)
    lines = table(cases, sample(cases, args.repeat, args.steps), args.repeat, args.steps)
    print("\n" + "\n".join(lines))
    if args.out:
        write_table(args.out, "Encryption at rest: benchmark", __doc__, lines)
    if schemas:
        drop_schemas(args.pg_url.split("?")[0], schemas)
    return 0


if __name__ == "__main__":
    sys.exit(main())
