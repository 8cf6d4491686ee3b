#!/usr/bin/env python
"""Scale: a parent with 200 children on PostgreSQL, each child doing 10 tool calls,
finished by ``agentlog recover`` running in 4 processes at once.

Each round, in a fresh schema: a process starts the parent, which spawns its children
(each a run of its own, executing in a thread of that process); once the parent has
spawned half of them (``--kill-at``), the process is SIGKILLed: the recoverers find the
parent and its unfinished children dead, and the parent, resumed, spawns the rest.
Then 4 ``agentlog recover`` processes start together and share the work (a run one of
them holds is busy for the others); when they have all exited and the tree is not
done (a run whose owner died after a recoverer had looked), 4 more start. Measured
from the recoverers' start to the parent's completion: the time, and the events per
second (the tree's events written during recovery, and all of the tree's events, over
that time). The figures are the median of ``--rounds`` rounds; the full run rewrites
the block in docs/bench_tree.md.

    python scripts/bench_tree.py                     # 200 children x 10 calls, 3 rounds
    python scripts/bench_tree.py --children 20 --calls 3 --rounds 1 --no-write
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve()
ROOT = HERE.parents[1]
sys.path[:0] = [str(ROOT), str(HERE.parent)]

from engine import Engine  # noqa: E402

DEFAULT_PG = os.environ.get(
    "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentlog_test"
)
DOC = ROOT / "docs" / "bench_tree.md"
BEGIN, END = "<!-- bench_tree:begin -->", "<!-- bench_tree:end -->"
HANG = 1800.0  # seconds: a round that takes longer is broken, not slow
SHARES = "resumed_by_each_recoverer"
PATH = os.pathsep.join((str(ROOT), str(HERE.parent)))  # campaign.scale_agent imports


# --- one round -------------------------------------------------------------------------


def _schema_url(base: str) -> tuple[str, str]:
    schema = f"bench_tree_{uuid.uuid4().hex[:8]}"
    return f"{base}{'&' if '?' in base else '?'}schema={schema}", schema


def _drop(base: str, schema: str) -> None:
    import psycopg

    with psycopg.connect(base.split("?")[0], autocommit=True) as conn:
        conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def _tree(eng: Engine, run_id: str) -> list[str]:
    kids = [e.data["child_run_id"] for e in eng.events(run_id) if e.type == "child_spawned"]
    return [run_id, *dict.fromkeys(kids)]


def _events(eng: Engine, ids: list[str]) -> int:
    return sum(len(eng.events(r)) for r in ids)


def _spawned(eng: Engine, run_id: str) -> int:
    try:
        return sum(e.type == "child_spawned" for e in eng.events(run_id))
    except Exception:  # not started yet
        return 0


def start_and_kill(url: str, run_id: str, children: int, calls: int, kill_at: int) -> None:
    """Start the parent in a process of its own; SIGKILL it once it has spawned
    ``kill_at`` children."""
    env = {**os.environ, "AGENTLOG_URL": url, "PYTHONPATH": PATH}
    cmd = [sys.executable, str(HERE), "--start", run_id, str(children), str(calls)]
    proc = subprocess.Popen(cmd, env=env, cwd=str(ROOT))
    eng = Engine.open(url)
    try:
        deadline = time.monotonic() + HANG
        while proc.poll() is None and _spawned(eng, run_id) < kill_at:
            if time.monotonic() > deadline:
                raise RuntimeError("the parent never spawned its children")
            time.sleep(0.01)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        eng.close()


def recover_until_done(url: str, run_id: str, processes: int) -> tuple[float, int, list[int]]:
    """Batches of ``processes`` concurrent ``agentlog recover`` until the parent is
    done: ``(seconds, batches, runs each recoverer resumed)``. A recoverer that fails
    (exit 1 or 2) stops the round."""
    env = {**os.environ, "AGENTLOG_URL": url, "PYTHONPATH": PATH}
    cmd = [sys.executable, "-m", "replay", "recover", "--json"]
    eng = Engine.open(url)
    started = time.monotonic()
    batches = 0
    resumed = [0] * processes
    try:
        while eng.state(run_id).status != "completed":
            if time.monotonic() - started > HANG or batches >= 50:
                raise RuntimeError(f"not done after {batches} batches: {eng.state(run_id)}")
            batches += 1
            procs = [
                subprocess.Popen(
                    cmd, env=env, cwd=str(ROOT), stdout=subprocess.PIPE, stderr=subprocess.PIPE
                )
                for _ in range(processes)
            ]
            for n, p in enumerate(procs):
                out, err = p.communicate()
                if p.returncode in (1, 2):
                    raise RuntimeError(f"recover exited {p.returncode}: {err[-2000:].decode()}")
                resumed[n] += len(json.loads(out or b"[]"))
        return time.monotonic() - started, batches, resumed
    finally:
        eng.close()


def one_round(a: argparse.Namespace) -> dict[str, Any]:
    base, children, calls = a.url, a.children, a.calls
    url, schema = _schema_url(base)
    run_id = f"bench-tree-{uuid.uuid4().hex[:8]}"
    try:
        start_and_kill(url, run_id, children, calls, a.kill_at or (children + 1) // 2)
        eng = Engine.open(url)
        before = _events(eng, _tree(eng, run_id))
        seconds, batches, resumed = recover_until_done(url, run_id, a.processes)
        ids = _tree(eng, run_id)
        total = _events(eng, ids)
        done = sum(eng.state(r).status == "completed" for r in ids[1:])
        want = sum(i * 1000 * calls + calls * (calls - 1) // 2 for i in range(children))
        if eng.state(run_id).output != want or done != children:
            raise RuntimeError(f"wrong result: {eng.state(run_id).output} != {want}, {done}")
        eng.close()
        return {
            "seconds": seconds,
            "batches": batches,
            "events_total": total,
            "events_recovered": total - before,
            "events_before_kill": before,
            "resumed_by_each_recoverer": resumed,
        }
    finally:
        _drop(base, schema)


# --- the report ------------------------------------------------------------------------


def summary(rounds: list[dict[str, Any]], a: argparse.Namespace) -> str:
    med = {k: statistics.median(r[k] for r in rounds) for k in rounds[0] if k != SHARES}
    rate_rec = statistics.median(r["events_recovered"] / r["seconds"] for r in rounds)
    rate_all = statistics.median(r["events_total"] / r["seconds"] for r in rounds)
    pg = _pg_version(a.url)
    lines = [
        f"Command: `python scripts/bench_tree.py --children {a.children} --calls {a.calls} "
        f"--processes {a.processes} --rounds {a.rounds}"
        + (f" --kill-at {a.kill_at}" if a.kill_at else "")
        + "`  ",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC  ",
        f"Machine: {os.cpu_count()} cores (shared VM); Python {sys.version.split()[0]}; {pg}",
        "",
        "| round | recover time (s) | batches of recoverers | runs each resumed "
        "| events before the kill | events written by recovery | tree events "
        "| recovered ev/s | tree ev/s |",
        "|---:|---:|---:|---|---:|---:|---:|---:|---:|",
    ]
    for n, r in enumerate(rounds, 1):
        lines.append(
            f"| {n} | {r['seconds']:.1f} | {r['batches']} "
            f"| {' + '.join(map(str, r[SHARES]))} | {r['events_before_kill']:,} "
            f"| {r['events_recovered']:,} | {r['events_total']:,} "
            f"| {r['events_recovered'] / r['seconds']:,.0f} "
            f"| {r['events_total'] / r['seconds']:,.0f} |"
        )
    lines += [
        f"| **median** | **{med['seconds']:.1f}** | {med['batches']:g} | "
        f"| {med['events_before_kill']:,.0f} | {med['events_recovered']:,.0f} "
        f"| {med['events_total']:,.0f} | **{rate_rec:,.0f}** | {rate_all:,.0f} |",
    ]
    return "\n".join(lines)


def _pg_version(url: str) -> str:
    import psycopg

    with psycopg.connect(url.split("?")[0]) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return f"PostgreSQL {row[0] if row else '?'}"


def write_doc(body: str) -> None:
    text = DOC.read_text() if DOC.exists() else f"# Tree benchmark\n\n{BEGIN}\n{END}\n"
    head, rest = text.split(BEGIN, 1)
    DOC.write_text(f"{head}{BEGIN}\n{body}\n{END}{rest.split(END, 1)[1]}")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--children", type=int, default=200)
    p.add_argument("--calls", type=int, default=10, help="tool calls per child")
    p.add_argument("--processes", type=int, default=4, help="concurrent recover processes")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument(
        "--kill-at",
        type=int,
        default=0,
        help="SIGKILL the parent once it has spawned this many children (default: half)",
    )
    p.add_argument("--url", default=DEFAULT_PG, help="PostgreSQL (each round in its schema)")
    p.add_argument("--no-write", action="store_true", help="print only")
    p.add_argument("--json", action="store_true", help="the rounds as JSON on stdout")
    a = p.parse_args(argv)
    if min(a.children, a.calls, a.processes, a.rounds) < 1:
        p.error("--children, --calls, --processes and --rounds must be positive")
    if not 0 <= a.kill_at <= a.children:
        p.error("--kill-at must be between 1 and --children")
    if not a.url.startswith("postgres"):
        p.error("--url must be a PostgreSQL URL")
    return a


def main(argv: list[str]) -> int:
    if argv[:1] == ["--start"]:  # the parent's process (killed once it has spawned all)
        from campaign import scale_agent

        run_id, children, calls = argv[1], int(argv[2]), int(argv[3])
        scale_agent.engine.run(scale_agent.parent, run_id=run_id, children=children, calls=calls)
        return 0
    a = parse_args(argv)
    rounds = []
    for n in range(a.rounds):
        rounds.append(one_round(a))
        print(f"round {n + 1}: {json.dumps(rounds[-1])}", file=sys.stderr, flush=True)
    if a.json:
        print(json.dumps(rounds))
        return 0
    body = summary(rounds, a)
    print(body)
    if not a.no_write:
        write_doc(body)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
