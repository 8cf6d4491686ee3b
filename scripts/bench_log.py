#!/usr/bin/env python
"""Benchmark agentlog's log against the raw drivers underneath it.

Three measurements, every figure the median of ``--repeat`` runs, each run comparing
agentlog with a baseline measured in that same run (ratios are per-run, then median):

1. Append rate (events/s) for 1-event and 100-event commits through ``Store.append``
   beside the raw driver doing the same durable inserts: raw ``sqlite3`` (WAL, same
   ``synchronous``, a table shaped like ours, one INSERT per event, one transaction per
   commit) and raw ``psycopg`` (autocommit off, one transaction per commit, one
   ``unnest`` INSERT ... RETURNING into a table with a bigserial). The memory store is
   compared with a plain dict-of-lists under a lock with the same position check.
2. Time to rebuild a run's latest state (``engine.log.history.rebuild``) at 1k, 10k and
   100k events, with snapshots every 100 events and with none; the baseline is the 1k
   rebuild of the same run.
3. Bytes stored per event (SQLite page-count delta, PostgreSQL
   ``pg_total_relation_size`` delta) beside a raw table holding the same rows.

Usage::

    python scripts/bench_log.py --quick                 # smoke test, ~10 s
    python scripts/bench_log.py --repeat 5              # full run, writes docs/bench_log.md
    python scripts/bench_log.py --stores memory,sqlite --repeat 3 --no-write

PostgreSQL work happens in throw-away schemas ``bench_<random>_*`` that are dropped at
the end; SQLite files live in a temporary directory on the same disk as ``/tmp``.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
from benchkit import PG_URL
from benchkit.log_append import AppendResult, bench_append
from benchkit.log_bytes import BytesResult, bench_bytes
from benchkit.log_rebuild import RebuildResult, bench_rebuild
from benchkit.log_report import machine_note, report, write_doc
from benchkit.log_stores import Env, Variant

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOC = ROOT / "docs" / "bench_log.md"
DEFAULT_PG = PG_URL
ALL_STORES = ("memory", "sqlite", "postgres")


def pg_base_url(url: str) -> str | None:
    base = url.split("?", 1)[0]
    try:
        with psycopg.connect(base, connect_timeout=5, autocommit=True) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        reason = str(e).strip().splitlines()[-1]
        print(f"PostgreSQL unavailable at {base}: {reason}", file=sys.stderr)
        return None
    return base


def pg_server_version(base: str) -> str:
    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute("SHOW server_version").fetchone()
        sync = conn.execute("SHOW synchronous_commit").fetchone()
    return f"PostgreSQL {row[0] if row else '?'} (synchronous_commit={sync[0] if sync else '?'})"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--quick", action="store_true", help="fast smoke run (small sizes, short)")
    p.add_argument("--repeat", type=int, default=None, help="runs per figure (default 5; 2 quick)")
    p.add_argument(
        "--stores",
        default=",".join(ALL_STORES),
        help="comma-separated subset of memory,sqlite,postgres (sqlite runs FULL and NORMAL)",
    )
    p.add_argument("--pg-url", default=DEFAULT_PG, help="PostgreSQL URL (schema is added)")
    p.add_argument("--seconds", type=float, default=None, help="time per append measurement")
    p.add_argument(
        "--only",
        default="append,rebuild,bytes",
        help="comma-separated subset of append,rebuild,bytes",
    )
    p.add_argument("--out", type=Path, default=None, help=f"Markdown file (default {DEFAULT_DOC})")
    p.add_argument("--no-write", action="store_true", help="print only (default in --quick)")
    args = p.parse_args(argv)
    stores = [s.strip() for s in args.stores.split(",") if s.strip()]
    bad = [s for s in stores if s not in ALL_STORES]
    if bad:
        p.error(f"unknown store(s) {', '.join(bad)}; choose from {', '.join(ALL_STORES)}")
    args.stores = stores
    args.only = {s.strip() for s in args.only.split(",") if s.strip()}
    if args.repeat is None:
        args.repeat = 2 if args.quick else 5
    if args.repeat < 1:
        p.error("--repeat must be at least 1")
    if args.seconds is None:
        args.seconds = 0.15 if args.quick else 1.0
    return args


@contextlib.contextmanager
def environment(args: argparse.Namespace) -> Iterator[Env]:
    pg_base = pg_base_url(args.pg_url) if "postgres" in args.stores else None
    if "postgres" in args.stores and pg_base is None:
        print("skipping postgres", file=sys.stderr)
        args.stores.remove("postgres")
    tmp = Path(tempfile.mkdtemp(prefix="agentlog_bench_"))
    env = Env(tmp, pg_base, f"bench_{uuid.uuid4().hex[:8]}")
    try:
        yield env
    finally:
        with contextlib.suppress(Exception):
            env.drop_schemas()
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    quick: bool = args.quick
    every = 100
    rebuild_sizes = [1_000, 10_000] if quick else [1_000, 10_000, 100_000]
    bytes_n = 2_000 if quick else 10_000
    rebuild_seconds = 0.05 if quick else 0.3
    started = time.perf_counter()
    with environment(args) as env:
        variants: list[Variant] = []
        for s in args.stores:
            if s == "sqlite":
                variants += [
                    Variant("sqlite FULL", "sqlite"),
                    Variant("sqlite NORMAL", "sqlite", "NORMAL"),
                ]
            else:
                variants.append(Variant(s, s))
        appends: list[AppendResult] = []
        rebuilds: list[RebuildResult] = []
        sizes: list[BytesResult] = []
        if "append" in args.only:
            print("append rate:", flush=True)
            appends = bench_append(env, variants, [1, 100], args.repeat, args.seconds)
        if "rebuild" in args.only:
            print("rebuild:", flush=True)
            rebuilds = bench_rebuild(
                env, args.stores, rebuild_sizes, args.repeat, rebuild_seconds, every
            )
        if "bytes" in args.only:
            print("bytes per event:", flush=True)
            kinds = [s for s in args.stores if s != "memory"]
            sizes = bench_bytes(env, kinds, bytes_n, args.repeat, every)
        pg_note = pg_server_version(env.pg_base) if env.pg_base else "PostgreSQL not measured"
    elapsed = time.perf_counter() - started

    tables, targets = report(appends, rebuilds, sizes, every)
    cmd = "python scripts/bench_log.py " + " ".join(sys.argv[1:] if argv is None else argv)
    header = [
        f"Command: `{cmd.strip()}`  ",
        f"Date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}  ",
        f"Machine: {machine_note()}; {pg_note}  ",
        f"Repeats: {args.repeat} per figure; {args.seconds:g} s per append measurement; "
        f"total runtime {elapsed:.0f} s",
        "",
    ]
    body = "\n".join(header) + "\n" + tables
    if targets:
        body += "\n### Targets\n\n" + "\n".join(f"- {t}" for t in targets) + "\n"
    print()
    print(body)
    if not (args.no_write or (quick and args.out is None)):
        out = args.out or DEFAULT_DOC
        write_doc(out, body)
        print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
