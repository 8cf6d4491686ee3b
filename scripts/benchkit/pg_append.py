"""Aggregate appends per second of 1, 4 and 8 writer processes on one PostgreSQL database:
the lock-free ``agentlog_append`` (the writers' barrier) against the old body (an
EXCLUSIVE table lock and ``pg_notify`` in every transaction), in the same run.

    python scripts/benchkit/pg_append.py [--url postgresql://...] [--rounds 3] [--seconds 3]

Each append is one event and one run-index row, one commit, as the engine's lifecycle
appends are; the new rounds include the notifier's hints (the old ones notify in the
function instead). Every process opens the store first (which installs the new function);
for the old rounds the old body replaces it before the start (every session recompiles
a plpgsql function whose row changed). Writes docs/bench_pg_append.md with --write.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg
from psycopg.sql import SQL, Composed, Identifier

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from engine import events as ev
from engine.store import Append, open_store
from engine.store.ports import RunRow
from engine.store.postgres_append import APPEND_FUNCTION, FENCED


def old_body(schema: str) -> Composed:
    """``agentlog_append`` as it was before the writers' barrier (git history of
    engine/store/postgres.py): the EXCLUSIVE table lock first, ``pg_notify`` before the
    insert; the rest is today's body."""
    start = APPEND_FUNCTION.index("    PERFORM pg_advisory_xact_lock_shared")
    end = APPEND_FUNCTION.index("    IF fence_run")
    lock = "    LOCK TABLE {schema}.{table} IN EXCLUSIVE MODE;\n"
    text = APPEND_FUNCTION[:start] + lock + APPEND_FUNCTION[end:]
    notify = "    PERFORM pg_notify('agentlog_events', '');\n    RETURN QUERY INSERT"
    text = text.replace("    RETURN QUERY INSERT", notify)
    table, uuid_type = Identifier("agentlog_events"), Identifier("uuid")
    return SQL(text).format(  # type: ignore[arg-type]
        schema=Identifier(schema), table=table, idtype=uuid_type, fenced=SQL(FENCED)
    )


def _writer(url: str, mode: str, ready: Any, start: Any, seconds: float, out: Any) -> None:
    store = open_store(url)
    if mode == "old":  # the old code had no notifier: its function notified
        store._events.notifier.poke = lambda: None  # type: ignore[attr-defined]
    stream, run_id = uuid.uuid4(), f"bench-{os.getpid()}-{uuid.uuid4().hex[:6]}"
    ready.release()
    start.wait()
    n, end = 0, time.monotonic() + seconds
    while time.monotonic() < end:
        n += 1
        now = time.time()
        event = ev.StepStarted(at=now, call=n, name="s")
        row = RunRow(run_id, "bench", "running", now, now, None, n)
        store.append([Append(stream, n, event)], runs=[row])
    out.put(n)
    store.close()


def measure(base: str, mode: str, writers: int, seconds: float) -> float:
    """Aggregate appends per second of ``writers`` processes on a fresh schema."""
    schema = f"bench_pga_{mode}_{writers}_{uuid.uuid4().hex[:6]}"
    url = f"{base}?schema={schema}"
    open_store(url).close()  # the schema, once, before the writers race to open it
    ctx = mp.get_context("spawn")
    ready, start, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    job = (url, mode, ready, start, seconds, out)
    procs = [ctx.Process(target=_writer, args=job) for _ in range(writers)]
    for p in procs:
        p.start()
    for _ in procs:
        ready.acquire()
    with psycopg.connect(base, autocommit=True) as conn:
        if mode == "old":
            conn.execute(old_body(schema))
        start.set()
        total = sum(out.get() for _ in procs)
        for p in procs:
            p.join()
        conn.execute(f'DROP SCHEMA "{schema}" CASCADE'.encode())
    return total / seconds


def main() -> None:
    parser = argparse.ArgumentParser()
    default = os.environ.get(
        "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1/postgres"
    )
    parser.add_argument("--url", default=default.split("?")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--writers", default="1,4,8")
    parser.add_argument("--write", action="store_true", help="write docs/bench_pg_append.md")
    args = parser.parse_args()
    counts = [int(w) for w in args.writers.split(",")]
    got: dict[tuple[str, int], list[float]] = {}
    for _ in range(args.rounds):  # interleaved: both modes see the same machine load
        for n in counts:
            for mode in ("old", "new"):
                got.setdefault((mode, n), []).append(measure(args.url, mode, n, args.seconds))
    lines = _report(got, counts, args)
    print("\n".join(lines))
    if args.write:
        path = Path(__file__).resolve().parents[2] / "docs" / "bench_pg_append.md"
        path.write_text("\n".join(lines) + "\n")


def _report(got: dict[tuple[str, int], list[float]], counts: list[int], args: Any) -> list[str]:
    med = {k: statistics.median(v) for k, v in got.items()}
    lines = [
        "# PostgreSQL appends: the writers' barrier against the table lock",
        "",
        f"`python scripts/benchkit/pg_append.py --rounds {args.rounds} --seconds {args.seconds:g}`:"
        f" medians of {args.rounds} interleaved rounds, one event and one run-index row per commit,"
        f" {os.cpu_count()} cores shared with other work (noisy; compare within a row).",
        "",
        "| writers | old (table lock), appends/s | new (barrier), appends/s | new / old |"
        " new vs 1 new writer |",
        "| --- | --- | --- | --- | --- |",
    ]
    for n in counts:
        old, new, one = med[("old", n)], med[("new", n)], med[("new", counts[0])]
        lines.append(f"| {n} | {old:,.0f} | {new:,.0f} | {new / old:.2f}x | {new / one:.2f}x |")
    return lines


if __name__ == "__main__":
    main()
