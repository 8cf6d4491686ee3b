#!/usr/bin/env python
"""Benchmark the projections: catch-up, ``engine.state`` at a position, ``engine.stats``.

On SQLite and PostgreSQL, in one invocation, every figure a median of ``--repeat``:

1. Catch-up throughput: every view of ``projections.views.all_views()`` emptied, then
   brought up to the head together by one ``Runner.catch_up()`` over a log of
   ``--runs`` realistic runs (about 9.5 events a run), in events per second; beside it,
   a raw ``SELECT`` of the same events through the driver (``sqlite3``, ``psycopg``) in
   pages of the runner's batch, in the same repeat, and the ratio of the two (per repeat,
   then median). Targets: >= 20,000 events/s on SQLite, >= 10,000 on PostgreSQL.
2. ``engine.state(run_id, at=position)`` at ``--positions`` random positions of one run
   of ``--long`` events written as the engine writes it (snapshots at its cadence):
   median and p95 in milliseconds. Target: under 50 ms.
3. ``engine.stats()`` over the ``--runs`` runs: once cold (the views emptied first, so the
   call catches them up) and ``--repeat`` times warm (the views current, as a follower
   keeps them), and ``agentlog stats --json`` as a new process (interpreter start
   included). Target: warm median under 1 s.

Usage::

    python scripts/bench_projections.py --quick          # smoke run, small sizes
    python scripts/bench_projections.py                   # 10,000 runs, a 100,000-event run
    python scripts/bench_projections.py --stores sqlite --out /tmp/bench.md

PostgreSQL work happens in throw-away schemas ``benchproj_<random>_*`` dropped at the end;
SQLite files live in a temporary directory. It measures; it is not a test.
"""

from __future__ import annotations

import argparse
import random
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psycopg
from benchkit import PG_URL, alternating
from benchkit.log_stores import Env
from benchkit.proj_workload import long_run, write_runs

from engine import Engine
from projections import Runner
from projections.views import all_views

ROOT = Path(__file__).resolve().parent.parent
TARGET_RATE = {"sqlite": 20_000, "postgres": 10_000}  # catch-up, events/s
TARGET_STATE_MS = 50.0
TARGET_STATS_S = 1.0


@dataclass
class Result:
    store: str
    events: int = 0
    catch_up: list[float] = field(default_factory=list)  # events/s
    raw: list[float] = field(default_factory=list)  # events/s
    ratio: list[float] = field(default_factory=list)
    state_ms: list[float] = field(default_factory=list)
    stats_cold: float = 0.0
    stats_warm: list[float] = field(default_factory=list)
    stats_cli: list[float] = field(default_factory=list)


# --- the three measurements ----------------------------------------------------------


def time_catch_up(runner: Runner) -> tuple[int, float]:
    """Empty every view, then catch them all up together: (events read, seconds)."""
    for view in runner.views.values():
        runner.store.views.reset(view.table(), runner.version(view))
    start = time.perf_counter()
    read = runner.catch_up()
    return read, time.perf_counter() - start


def raw_select(kind: str, where: str, page: int) -> Callable[[], int]:
    """A function reading every event row in global order through the bare driver, in
    pages of ``page`` rows (the runner's batch); it returns the rows read."""
    if kind == "sqlite":
        sql = (
            "SELECT rowid, originator_id, originator_version, topic, state "
            "FROM agentlog_events WHERE rowid > ? ORDER BY rowid LIMIT ?"
        )

        def read_sqlite() -> int:
            with sqlite3.connect(where) as conn:
                return _pages(lambda after: conn.execute(sql, (after, page)).fetchall())

        return read_sqlite
    base, schema = where.split("?schema=")
    sql = (
        "SELECT notification_id, originator_id, originator_version, topic, state "
        f'FROM "{schema}".agentlog_events WHERE notification_id > %s '
        "ORDER BY notification_id LIMIT %s"
    )

    def read_postgres() -> int:
        with psycopg.connect(base) as conn:
            return _pages(lambda after: conn.execute(sql, (after, page)).fetchall())

    return read_postgres


def _pages(fetch: Callable[[int], list[tuple[object, ...]]]) -> int:
    after, total = 0, 0
    while rows := fetch(after):
        total += len(rows)
        after = int(str(rows[-1][0]))
    return total


def bench_catch_up(res: Result, runner: Runner, raw: Callable[[], int], repeat: int) -> None:
    for r in range(repeat):
        ours = theirs = 0.0
        for which in alternating(["ours", "raw"], r):
            if which == "ours":
                read, took = time_catch_up(runner)
                ours = read / took
            else:
                start = time.perf_counter()
                rows = raw()
                theirs = rows / (time.perf_counter() - start)
        res.catch_up.append(ours)
        res.raw.append(theirs)
        res.ratio.append(ours / theirs)
        print(f"  catch-up {res.store} {r + 1}/{repeat}: {ours:,.0f} ev/s, raw {theirs:,.0f}")


def bench_stats(res: Result, eng: Engine, url: str, repeat: int) -> None:
    runner = Runner(eng.store, all_views())
    for view in runner.views.values():
        eng.store.views.reset(view.table(), runner.version(view))
    start = time.perf_counter()
    eng.stats()
    res.stats_cold = time.perf_counter() - start
    for _ in range(repeat):
        start = time.perf_counter()
        eng.stats()
        res.stats_warm.append(time.perf_counter() - start)
    for _ in range(min(repeat, 3)):
        start = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "replay.cli", "stats", "--json", "--url", url],
            check=True,
            capture_output=True,
        )
        res.stats_cli.append(time.perf_counter() - start)
    print(f"  stats {res.store}: cold {res.stats_cold:.3f} s, warm {med(res.stats_warm):.3f} s")


def bench_state(res: Result, eng: Engine, run_id: str, length: int, positions: int) -> None:
    rng = random.Random(11)
    for at in rng.sample(range(1, length + 1), min(positions, length)):
        start = time.perf_counter()
        folded = eng.state(run_id, at=at)
        res.state_ms.append((time.perf_counter() - start) * 1e3)
        assert folded.position == at, (folded.position, at)
    print(f"  state {res.store}: median {med(res.state_ms):.2f} ms, p95 {p95(res.state_ms):.2f}")


# --- one store --------------------------------------------------------------------------


def url_of(env: Env, kind: str, tag: str) -> tuple[str, str]:
    """A new store's URL, and where the raw driver finds the same table."""
    if kind == "sqlite":
        path = str(env.sqlite_path(tag))
        return f"sqlite:///{path}", path
    url = env.pg_url(env.schema(tag))
    return url, url


def bench_store(kind: str, env: Env, args: argparse.Namespace) -> Result:
    res = Result(kind)
    url, where = url_of(env, kind, "runs")
    eng = Engine(url)
    try:
        start = time.perf_counter()
        res.events = write_runs(eng.store, args.runs)
        took = time.perf_counter() - start
        print(f"{kind}: wrote {args.runs:,} runs, {res.events:,} events in {took:.1f} s")
        runner = Runner(eng.store, all_views())
        bench_catch_up(res, runner, raw_select(kind, where, runner.batch), args.repeat)
        bench_stats(res, eng, url, args.repeat)
    finally:
        eng.close()
    long_url, _ = url_of(env, kind, "long")
    eng = Engine(long_url)
    try:
        run_id = long_run(eng.store, args.long)
        bench_state(res, eng, run_id, args.long, args.positions)
    finally:
        eng.close()
    return res


# --- the report -------------------------------------------------------------------------


def med(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def p95(xs: list[float]) -> float:
    return statistics.quantiles(xs, n=20)[-1] if len(xs) >= 2 else med(xs)


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def report(results: list[Result], args: argparse.Namespace) -> str:
    lines = [
        f"Views: {', '.join(v.name for v in all_views())}; {args.runs:,} runs; "
        f"a {args.long:,}-event run; medians of {args.repeat}.",
        "",
        "| store | events | catch-up ev/s | raw SELECT ev/s | ours/raw | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        rate = med(r.catch_up)
        target = TARGET_RATE[r.store]
        lines.append(
            f"| {r.store} | {r.events:,} | {rate:,.0f} | {med(r.raw):,.0f} | "
            f"{med(r.ratio):.3f} | ≥ {target:,}: {verdict(rate >= target)} |"
        )
    lines += ["", "| store | state(at) median ms | p95 ms | target |", "|---|---:|---:|---|"]
    for r in results:
        ok = p95(r.state_ms) < TARGET_STATE_MS
        lines.append(
            f"| {r.store} | {med(r.state_ms):.2f} | {p95(r.state_ms):.2f} | "
            f"< {TARGET_STATE_MS:.0f} ms: {verdict(ok)} |"
        )
    lines += [
        "",
        "| store | runs | stats() cold s | stats() warm s | `agentlog stats --json` s | target |",
        "|---|---:|---:|---:|---:|---|",
    ]
    for r in results:
        warm = med(r.stats_warm)
        lines.append(
            f"| {r.store} | {args.runs:,} | {r.stats_cold:.3f} | {warm:.3f} | "
            f"{med(r.stats_cli):.3f} | < {TARGET_STATS_S:.0f} s: {verdict(warm < TARGET_STATS_S)} |"
        )
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    p.add_argument("--quick", action="store_true", help="smoke run: 1,000 runs, 10,000 events")
    p.add_argument("--runs", type=int, default=None, help="short runs (default 10,000)")
    p.add_argument("--long", type=int, default=None, help="the long run (default 100,000)")
    p.add_argument("--positions", type=int, default=50, help="random positions for state")
    p.add_argument("--repeat", type=int, default=5, help="repeats per figure (default 5)")
    p.add_argument("--stores", default="sqlite,postgres", help="sqlite,postgres or one")
    p.add_argument("--pg-url", default=PG_URL, help="PostgreSQL URL (a schema is added)")
    p.add_argument("--out", type=Path, default=None, help="also write the tables here")
    args = p.parse_args(argv)
    args.runs = args.runs or (1_000 if args.quick else 10_000)
    args.long = args.long or (10_000 if args.quick else 100_000)
    args.stores = [s for s in args.stores.split(",") if s]
    if set(args.stores) - {"sqlite", "postgres"} or args.repeat < 1:
        p.error("--stores takes sqlite and/or postgres; --repeat at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="agentlog_benchproj_"))
    env = Env(tmp, args.pg_url.split("?", 1)[0], f"benchproj_{uuid.uuid4().hex[:8]}")
    try:
        results = [bench_store(kind, env, args) for kind in args.stores]
    finally:
        env.drop_schemas()
        shutil.rmtree(tmp, ignore_errors=True)
    body = report(results, args)
    print()
    print(body)
    if args.out is not None:
        args.out.write_text(body)
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
