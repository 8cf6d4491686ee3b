"""The writer processes of scripts/bench_writers.py: each serves rounds on command (``go
START SECONDS`` on stdin -> ``CALLS END [APPENDS COMMITS]`` on stdout), its threads
looping one kind of durable write until the round's end, set up and warmed once.

Kinds: ``engine`` (runs of keyed side-effecting calls through the real engine;
``engine-alone``: the same with SQLite's group commit held to one append per COMMIT), ``sqlite``
(raw sqlite3 one-row commits, WAL, synchronous=FULL) and ``pg`` (raw psycopg one-row
autocommit inserts)."""

from __future__ import annotations

import os
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

Loop = Callable[[float], int]  # until (time.time()) -> durable writes made
PAYLOAD = os.urandom(50).hex()  # about 100 B, as the calls' events are
RAW_TABLE = "bench_raw_commits"
RAW_DDL = f"CREATE TABLE IF NOT EXISTS {RAW_TABLE} (id {{id}}, k TEXT NOT NULL, v TEXT NOT NULL)"


def engine_loops(url: str, threads: int, run_calls: int) -> tuple[list[Loop], Callable[[], str]]:
    """One engine for the process; each thread runs agents of ``run_calls`` keyed calls."""
    from engine import Engine

    engine = Engine.open(url)

    @engine.tool(side_effect=True, name="bench_writers_keyed")
    def keyed(i: int, *, idempotency_key: str) -> dict[str, Any]:
        return {"i": i, "v": PAYLOAD}

    @engine.agent(name="bench:writers")
    def agent(run: Any, steps: int) -> int:
        for i in range(steps):
            keyed(i)
        return steps

    def loop(until: float) -> int:
        calls = 0
        while time.time() < until:
            result = engine.run(agent, steps=run_calls)
            assert result.status == "completed", result
            calls += run_calls
        return calls

    def batches() -> str:  # the group commit's counters, when the store has them
        store = getattr(engine, "_store", None)
        group = getattr(getattr(store, "_events", None), "group", None)
        return f"{group.appends} {group.commits}" if group is not None else ""

    return [loop] * threads, batches


def sqlite_loops(path: str, threads: int) -> list[Loop]:
    def one() -> Loop:
        db = sqlite3.connect(path, isolation_level=None, timeout=60, check_same_thread=False)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        key = f"{os.getpid()}:{threading.get_ident()}"

        def loop(until: float) -> int:
            n = 0
            while time.time() < until:
                db.execute(f"INSERT INTO {RAW_TABLE} (k, v) VALUES (?, ?)", (key, PAYLOAD))
                n += 1
            return n

        return loop

    return [one() for _ in range(threads)]


def pg_loops(url: str, schema: str, threads: int) -> list[Loop]:
    import psycopg

    def one() -> Loop:
        conn = psycopg.connect(url, autocommit=True)
        sql = f'INSERT INTO "{schema}".{RAW_TABLE} (k, v) VALUES (%s, %s)'
        key = f"{os.getpid()}:{id(conn)}"

        def loop(until: float) -> int:
            n = 0
            while time.time() < until:
                conn.execute(sql, (key, PAYLOAD))
                n += 1
            return n

        return loop

    return [one() for _ in range(threads)]


def create_raw_table(kind: str, where: str, schema: str = "") -> None:
    """The raw rows' table, made once before any writer starts."""
    if kind == "sqlite":
        with sqlite3.connect(where) as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(RAW_DDL.format(id="INTEGER PRIMARY KEY"))
        return
    import psycopg

    with psycopg.connect(where, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{schema}"')
        conn.execute(RAW_DDL.replace(RAW_TABLE, f'"{schema}".{RAW_TABLE}').format(id="BIGSERIAL"))


def serve(kind: str, where: str, threads: int, run_calls: int, schema: str) -> None:
    """The worker's main loop (see the module's docstring)."""
    batches: Callable[[], str] = str
    if kind == "engine-alone":  # the same engine, one append per COMMIT: no group commit
        from engine.store import sqlite_group

        sqlite_group.MAX_BATCH = 1
    if kind.startswith("engine"):
        loops, batches = engine_loops(where, threads, run_calls)
    elif kind == "sqlite":
        loops = sqlite_loops(where, threads)
    else:
        loops = pg_loops(where, schema, threads)
    _round(loops, time.time(), 0.3)  # warm up: schemas, pools, imports
    print("ready", flush=True)
    for line in sys.stdin:
        words = line.split()
        if not words or words[0] != "go":
            break
        calls, end = _round(loops, float(words[1]), float(words[2]))
        print(calls, end, batches(), flush=True)


def _round(loops: list[Loop], start: float, seconds: float) -> tuple[int, float]:
    counts = [0] * len(loops)
    ends = [start] * len(loops)

    def go(i: int) -> None:
        time.sleep(max(0.0, start - time.time()))
        counts[i] = loops[i](start + seconds)
        ends[i] = time.time()

    threads = [threading.Thread(target=go, args=(i,)) for i in range(len(loops))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return sum(counts), max(ends)
