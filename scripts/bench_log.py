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
2. Time to rebuild a run's latest state (``engine.history.rebuild``) at 1k, 10k and
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
import gc
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import psycopg
from msgspec.structs import replace

from engine import events as ev
from engine.history import rebuild, run_stream
from engine.state import RunState, evolve
from engine.store import Append, Store, open_store
from engine.store.codec import encode_event

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOC = ROOT / "docs" / "bench_log.md"
DEFAULT_PG = os.environ.get(
    "AGENTLOG_BENCH_POSTGRES_URL",
    os.environ.get(
        "AGENTLOG_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/agentlog_test"
    ),
)
ALL_STORES = ("memory", "sqlite", "postgres")
BEGIN_MARK = "<!-- bench_log:begin -->"
END_MARK = "<!-- bench_log:end -->"
T0 = 1_790_000_000.0

# Targets the results are reported against.
TARGET_REBUILD_RATIO = 1.5  # t(100k) / t(1k), with snapshots
TARGET_SQLITE_APPEND = 0.5  # ours / raw sqlite3, 1-event commits, same synchronous
TARGET_PG_APPEND = 0.5  # ours / raw psycopg, 100-event commits


# --- realistic events ------------------------------------------------------------------


def tool_succeeded(i: int) -> ev.ToolSucceeded:
    """A typical tool result: a small dict, as a search or HTTP tool returns."""
    return ev.ToolSucceeded(
        at=T0 + i * 0.25,
        call=i,
        tool="web.search",
        result={
            "status": 200,
            "hits": 3,
            "top": f"https://example.com/articles/{i % 997}",
            "snippet": "Event sourcing stores every change as an immutable fact.",
            "elapsed_ms": 118,
        },
        duration=0.118,
    )


def run_events(n: int) -> list[ev.Event]:
    """``n`` events of a plausible run: a start, then tool calls and decisions."""
    out: list[ev.Event] = [
        ev.AgentStarted(
            at=T0,
            agent="bench.agents:researcher",
            import_path="bench.agents",
            input={"question": "How do durable agents recover from crashes?"},
        )
    ]
    call = 0
    while len(out) < n:
        call += 1
        at = T0 + len(out) * 0.25
        kind = call % 10
        if kind == 0:
            out.append(ev.StepCompleted(at=at, call=call, name=f"step-{call // 10}", duration=2.5))
        elif kind == 5:
            out.append(
                ev.LlmDecided(
                    at=at,
                    call=call,
                    name="next_action",
                    value={"action": "search", "query": f"durable agents {call}", "p": 0.82},
                    args_hash="9f2c4e1ab7d03f55",
                    duration=0.9,
                )
            )
        else:
            out.append(
                ev.ToolInvoked(
                    at=at,
                    call=call,
                    tool="web.search",
                    args={"q": f"durable agents part {call}", "limit": 3},
                    args_hash="5be0c2d9a1f3e877",
                )
            )
            if len(out) < n:
                s = tool_succeeded(call)
                out.append(replace(s, at=at + 0.1))
    return out[:n]


# --- timing helpers --------------------------------------------------------------------


def median(xs: list[float]) -> float:
    return statistics.median(xs) if xs else float("nan")


def rate(step: Callable[[], None], per_step: int, seconds: float, min_steps: int) -> float:
    """Events per second of ``step`` run for at least ``seconds`` and ``min_steps``."""
    gc.collect()
    n = 0
    start = time.perf_counter()
    while True:
        step()
        n += 1
        elapsed = time.perf_counter() - start
        if n >= min_steps and elapsed >= seconds:
            return n * per_step / elapsed


def per_call(fn: Callable[[], Any], seconds: float) -> float:
    """Mean seconds per call of ``fn`` over at least ``seconds`` (one call at least)."""
    gc.collect()
    n = 0
    start = time.perf_counter()
    while True:
        fn()
        n += 1
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return elapsed / n


# --- environments: where each store and its baseline live ------------------------------


@dataclass
class Env:
    tmp: Path
    pg_base: str | None  # libpq URL without query, or None when PostgreSQL is unavailable
    prefix: str  # schema prefix for this invocation
    schemas: list[str] = field(default_factory=list)
    counter: int = 0

    def fresh_name(self, tag: str) -> str:
        self.counter += 1
        return f"{tag}_{self.counter}"

    def schema(self, tag: str) -> str:
        name = f"{self.prefix}_{self.fresh_name(tag)}"
        self.schemas.append(name)
        return name

    def sqlite_path(self, tag: str) -> Path:
        return self.tmp / f"{self.fresh_name(tag)}.db"

    def pg_url(self, schema: str) -> str:
        assert self.pg_base is not None
        return f"{self.pg_base}?schema={schema}"

    def drop_schemas(self) -> None:
        if self.pg_base is None or not self.schemas:
            return
        with psycopg.connect(self.pg_base, autocommit=True) as conn:
            for s in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{s}" CASCADE')
        self.schemas.clear()


@dataclass(frozen=True)
class Variant:
    """One store configuration for the append benchmark."""

    label: str
    kind: str  # memory, sqlite, postgres
    synchronous: str = "FULL"

    @property
    def raw_label(self) -> str:
        return {
            "memory": "dict+lock",
            "sqlite": f"sqlite3 {self.synchronous}",
            "postgres": "psycopg",
        }[self.kind]


def open_ours(env: Env, v: Variant, tag: str) -> Store:
    if v.kind == "memory":
        return open_store("memory://")
    if v.kind == "sqlite":
        url = f"sqlite:///{env.sqlite_path(tag)}"
        if v.synchronous != "FULL":
            url += f"?synchronous={v.synchronous}"
        return open_store(url)
    return open_store(env.pg_url(env.schema(tag)))


# --- raw baselines ---------------------------------------------------------------------


class RawMemory:
    """A dict of per-stream lists plus a global list, under one lock, with the same
    optimistic position check a log needs. The floor for any in-process store."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.streams: dict[uuid.UUID, list[tuple[str, bytes]]] = {}
        self.log: list[tuple[uuid.UUID, int, str, bytes]] = []

    def insert(self, rows: list[tuple[uuid.UUID, int, str, bytes]]) -> list[int]:
        with self.lock:
            nxt: dict[uuid.UUID, int] = {}
            for sid, pos, _, _ in rows:
                expected = nxt.get(sid) or len(self.streams.get(sid, ())) + 1
                if pos != expected:
                    raise RuntimeError("position taken")
                nxt[sid] = pos + 1
            ids = []
            for sid, pos, topic, state in rows:
                self.streams.setdefault(sid, []).append((topic, state))
                self.log.append((sid, pos, topic, state))
                ids.append(len(self.log))
            return ids

    def close(self) -> None:
        pass


RAW_SQLITE_DDL = (
    "CREATE TABLE IF NOT EXISTS raw_events (originator_id TEXT, originator_version INTEGER, "
    "topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
)


class RawSQLite:
    """sqlite3 with our pragmas (WAL, same synchronous) and our table's shape."""

    def __init__(self, path: Path, synchronous: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute(f"PRAGMA synchronous={synchronous}")
        self.conn.execute("PRAGMA busy_timeout=30000")
        self.conn.execute(RAW_SQLITE_DDL)
        self.cur = self.conn.cursor()

    def insert(self, rows: list[tuple[uuid.UUID, int, str, bytes]]) -> list[int]:
        cur = self.cur
        cur.execute("BEGIN")
        ids = []
        try:
            for sid, pos, topic, state in rows:
                cur.execute("INSERT INTO raw_events VALUES (?,?,?,?)", (sid.hex, pos, topic, state))
                ids.append(cur.lastrowid or 0)
        except BaseException:
            cur.execute("ROLLBACK")
            raise
        cur.execute("COMMIT")
        return ids

    def close(self) -> None:
        self.conn.close()


def raw_pg_ddl(schema: str) -> list[str]:
    return [
        f'CREATE SCHEMA IF NOT EXISTS "{schema}"',
        f'CREATE TABLE IF NOT EXISTS "{schema}".raw_events (originator_id uuid NOT NULL, '
        "originator_version bigint NOT NULL, topic text, state bytea, id bigserial, "
        "PRIMARY KEY (originator_id, originator_version))",
        # Our table has the same unique index, so the log can be read in global order.
        f'CREATE UNIQUE INDEX IF NOT EXISTS raw_events_id ON "{schema}".raw_events (id)',
    ]


class RawPostgres:
    """psycopg, autocommit off: one ``unnest`` INSERT ... RETURNING id, then COMMIT."""

    def __init__(self, base: str, schema: str) -> None:
        self.conn = psycopg.connect(base, autocommit=False)
        for stmt in raw_pg_ddl(schema):
            self.conn.execute(stmt)
        self.conn.commit()
        self.sql = (
            f'INSERT INTO "{schema}".raw_events (originator_id, originator_version, topic, state) '
            "SELECT * FROM unnest(%s::uuid[], %s::bigint[], %s::text[], %s::bytea[]) "
            "RETURNING id"
        )
        self.schema = schema

    def insert(self, rows: list[tuple[uuid.UUID, int, str, bytes]]) -> list[int]:
        cols = list(zip(*rows, strict=True))
        try:
            with self.conn.cursor() as cur:
                cur.execute(self.sql, (list(cols[0]), list(cols[1]), list(cols[2]), list(cols[3])))
                ids = [r[0] for r in cur.fetchall()]
        except BaseException:
            self.conn.rollback()
            raise
        self.conn.commit()
        return ids

    def close(self) -> None:
        self.conn.close()


Raw = RawMemory | RawSQLite | RawPostgres


def open_raw(env: Env, v: Variant, tag: str) -> Raw:
    if v.kind == "memory":
        return RawMemory()
    if v.kind == "sqlite":
        return RawSQLite(env.sqlite_path(tag), v.synchronous)
    assert env.pg_base is not None
    return RawPostgres(env.pg_base, env.schema(tag))


# --- 1. append rate --------------------------------------------------------------------


@dataclass
class AppendResult:
    variant: Variant
    batch: int
    ours: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)


def bench_append(
    env: Env, variants: list[Variant], batches: list[int], repeat: int, seconds: float
) -> list[AppendResult]:
    results = {(v, b): AppendResult(v, b) for v in variants for b in batches}
    for r in range(repeat):
        for v in variants:
            for b in batches:
                events = [tool_succeeded(i + 1) for i in range(b)]
                encoded = [encode_event(e) for e in events]
                store = open_ours(env, v, "ours")
                raw = open_raw(env, v, "raw")
                try:
                    ours_step = _ours_stepper(store, events)
                    raw_step = _raw_stepper(raw, encoded)
                    for _ in range(3):  # warm: connections, prepared statements, caches
                        ours_step()
                        raw_step()
                    # Alternate which goes first so drift does not favour one side.
                    min_steps = 3 if b > 1 else 20
                    if r % 2 == 0:
                        o = rate(ours_step, b, seconds, min_steps)
                        w = rate(raw_step, b, seconds, min_steps)
                    else:
                        w = rate(raw_step, b, seconds, min_steps)
                        o = rate(ours_step, b, seconds, min_steps)
                finally:
                    store.close()
                    raw.close()
                res = results[(v, b)]
                res.ours.append(o)
                res.raw.append(w)
                res.ratio.append(o / w)
                print(
                    f"  append {v.label:<14} x{b:<3} run {r + 1}/{repeat}: "
                    f"ours {o:>9.0f} ev/s  raw {w:>9.0f} ev/s  ratio {o / w:.2f}",
                    flush=True,
                )
    return list(results.values())


def _ours_stepper(store: Store, events: list[ev.ToolSucceeded]) -> Callable[[], None]:
    stream = uuid.uuid4()
    pos = 0

    def step() -> None:
        nonlocal pos
        store.append([Append(stream, pos + k + 1, e) for k, e in enumerate(events)])
        pos += len(events)

    return step


def _raw_stepper(raw: Raw, encoded: list[tuple[str, bytes]]) -> Callable[[], None]:
    stream = uuid.uuid4()
    pos = 0

    def step() -> None:
        nonlocal pos
        raw.insert([(stream, pos + k + 1, t, p) for k, (t, p) in enumerate(encoded)])
        pos += len(encoded)

    return step


# --- 2. rebuild ------------------------------------------------------------------------


@dataclass(frozen=True)
class RunData:
    size: int
    final: RunState  # the folded latest state (of the "snap" run id)
    snap_id: str  # written with a snapshot every ``every`` events
    plain_id: str  # the same events, no snapshot


def populate(store: Store, sizes: list[int], every: int) -> dict[int, RunData]:
    """Write two runs of each size into ``store``; the events are generated here and
    dropped afterwards, so the benchmark process does not hold 100k+ live objects that
    would make every garbage collection (and so every rebuild) slower."""
    out = {}
    for n in sizes:
        events = run_events(n)
        snap_id, plain_id = uuid.uuid4().hex, uuid.uuid4().hex
        state = RunState(run_id=snap_id)
        snaps = []
        for pos, e in enumerate(events, 1):
            state = evolve(state, e, pos)
            if pos % every == 0:
                snaps.append(state)
        write_run(store, snap_id, events, snaps)
        write_run(store, plain_id, events, [])
        out[n] = RunData(n, state, snap_id, plain_id)
    return out


def write_run(store: Store, run_id: str, events: list[ev.Event], snaps: list[RunState]) -> None:
    """Write ``events`` in 1000-event commits, then each snapshot (what
    ``RunWriter(snapshot_every=100)`` leaves behind, written faster)."""
    stream = run_stream(run_id)
    for start in range(0, len(events), 1000):
        chunk = events[start : start + 1000]
        store.append([Append(stream, start + k + 1, e) for k, e in enumerate(chunk)])
    for s in snaps:
        store.save_snapshot(stream, s)


@dataclass
class RebuildResult:
    store: str
    size: int
    snap: list[float] = field(default_factory=list)  # seconds
    plain: list[float] = field(default_factory=list)
    snap_ratio: list[float] = field(default_factory=list)  # t(n)/t(smallest), same run
    plain_ratio: list[float] = field(default_factory=list)
    speedup: list[float] = field(default_factory=list)  # plain / snap


def bench_rebuild(
    env: Env, kinds: list[str], sizes: list[int], repeat: int, seconds: float, every: int
) -> list[RebuildResult]:
    results: list[RebuildResult] = []
    for kind in kinds:
        store = open_ours(env, Variant(kind, kind), "rebuild")
        try:
            t = time.perf_counter()
            runs = populate(store, sizes, every)
            gc.collect()
            print(
                f"  {kind}: generated and wrote {2 * sum(sizes)} events and their snapshots "
                f"in {time.perf_counter() - t:.1f}s"
            )
            for rd in runs.values():  # the benchmark is only worth its numbers if this holds
                got_snap = rebuild(store, rd.snap_id)
                got_plain = rebuild(store, rd.plain_id)
                assert got_snap == rd.final, f"{kind}: snapshot rebuild differs at {rd.size}"
                assert replace(got_plain, run_id=rd.snap_id) == rd.final, f"{kind}: differs"
            by_size = {n: RebuildResult(kind, n) for n in sizes}
            base = sizes[0]
            for r in range(repeat):
                ts: dict[tuple[int, bool], float] = {}
                order = sizes if r % 2 == 0 else list(reversed(sizes))
                for n in order:
                    rd = runs[n]
                    for snap, rid in ((True, rd.snap_id), (False, rd.plain_id)):
                        ts[(n, snap)] = per_call(partial(rebuild, store, rid), seconds)
                for n in sizes:
                    res = by_size[n]
                    res.snap.append(ts[(n, True)])
                    res.plain.append(ts[(n, False)])
                    res.snap_ratio.append(ts[(n, True)] / ts[(base, True)])
                    res.plain_ratio.append(ts[(n, False)] / ts[(base, False)])
                    res.speedup.append(ts[(n, False)] / ts[(n, True)])
                big = sizes[-1]
                print(
                    f"  rebuild {kind:<8} run {r + 1}/{repeat}: "
                    + "  ".join(
                        f"{n}: {ts[(n, True)] * 1e3:.2f}/{ts[(n, False)] * 1e3:.1f} ms"
                        for n in sizes
                    )
                    + f"  t({big})/t({base}) snap {ts[(big, True)] / ts[(base, True)]:.2f}",
                    flush=True,
                )
            results.extend(by_size.values())
        finally:
            store.close()
    return results


# --- 3. bytes per event ----------------------------------------------------------------


@dataclass
class BytesResult:
    store: str
    payload: float = 0.0  # mean encoded event size
    ours: list[float] = field(default_factory=list)
    raw: list[float] = field(default_factory=list)
    ratio: list[float] = field(default_factory=list)
    snapshots: list[float] = field(default_factory=list)  # amortised, snapshot every 100


def _sqlite_bytes(path: Path, table: str | None = None) -> int:
    conn = sqlite3.connect(path)
    try:
        if table is not None:
            with contextlib.suppress(sqlite3.OperationalError):  # dbstat may be missing
                row = conn.execute(
                    "SELECT sum(pgsize) FROM dbstat WHERE name=? OR name LIKE ?",
                    (table, f"sqlite_autoindex_{table}_%"),
                ).fetchone()
                return int(row[0] or 0)
        page_size = conn.execute("PRAGMA page_size").fetchone()[0]
        return int(conn.execute("PRAGMA page_count").fetchone()[0]) * int(page_size)
    finally:
        conn.close()


def _pg_bytes(base: str, schema: str, table: str) -> int:
    with psycopg.connect(base, autocommit=True) as conn:
        row = conn.execute(
            "SELECT pg_total_relation_size(%s::regclass)", (f'"{schema}".{table}',)
        ).fetchone()
        return int(row[0]) if row else 0


def bench_bytes(env: Env, kinds: list[str], n: int, repeat: int, every: int) -> list[BytesResult]:
    events = run_events(n)
    encoded = [encode_event(e) for e in events]
    payload = sum(len(p) for _, p in encoded) / n
    snaps: list[RunState] = []
    state = RunState(run_id=uuid.uuid4().hex)
    for pos, e in enumerate(events, 1):
        state = evolve(state, e, pos)
        if pos % every == 0:
            snaps.append(state)
    results = []
    for kind in kinds:
        res = BytesResult(kind, payload)
        for r in range(repeat):
            v = Variant(kind, kind)
            store = open_ours(env, v, "bytes")
            raw = open_raw(env, v, "rawbytes")
            try:
                measure: list[Callable[[], int]]
                if kind == "sqlite":
                    assert isinstance(raw, RawSQLite)
                    ours_path = Path(store.name.removeprefix("sqlite:///"))
                    raw_path = Path(raw.conn.execute("PRAGMA database_list").fetchone()[2])
                    measure = [
                        partial(_sqlite_bytes, ours_path, "agentlog_events"),
                        partial(_sqlite_bytes, ours_path, "agentlog_snapshots"),
                        partial(_sqlite_bytes, raw_path, "raw_events"),
                    ]
                else:
                    assert env.pg_base is not None and isinstance(raw, RawPostgres)
                    schema = store.name.rsplit("schema=", 1)[1]
                    measure = [
                        partial(_pg_bytes, env.pg_base, schema, "agentlog_events"),
                        partial(_pg_bytes, env.pg_base, schema, "agentlog_snapshots"),
                        partial(_pg_bytes, env.pg_base, raw.schema, "raw_events"),
                    ]
                ours_size, snap_size, raw_size = measure
                o0, s0, w0 = ours_size(), snap_size(), raw_size()
                stream = run_stream(state.run_id)
                for start in range(0, n, 100):
                    chunk = events[start : start + 100]
                    store.append([Append(stream, start + k + 1, e) for k, e in enumerate(chunk)])
                    raw.insert(
                        [
                            (stream, start + k + 1, t, p)
                            for k, (t, p) in enumerate(encoded[start : start + 100])
                        ]
                    )
                for s in snaps:
                    store.save_snapshot(stream, s)
                o = (ours_size() - o0) / n
                w = (raw_size() - w0) / n
                res.ours.append(o)
                res.raw.append(w)
                res.ratio.append(o / w)
                res.snapshots.append((snap_size() - s0) / n)
            finally:
                store.close()
                raw.close()
            print(
                f"  bytes {kind:<8} run {r + 1}/{repeat}: ours {res.ours[-1]:.1f} B/ev  raw "
                f"{res.raw[-1]:.1f} B/ev  snapshots +{res.snapshots[-1]:.1f} B/ev",
                flush=True,
            )
        results.append(res)
    return results


# --- report ----------------------------------------------------------------------------


def fmt_rate(x: float) -> str:
    return f"{x:,.0f}"


def fmt_ms(s: float) -> str:
    ms = s * 1e3
    return f"{ms:.3f}" if ms < 1 else f"{ms:.2f}" if ms < 100 else f"{ms:.0f}"


def verdict(ok: bool) -> str:
    return "met" if ok else "**missed**"


def report(
    appends: list[AppendResult],
    rebuilds: list[RebuildResult],
    sizes: list[BytesResult],
    every: int,
) -> tuple[str, list[str]]:
    lines: list[str] = []
    targets: list[str] = []

    if appends:
        lines += [
            "### Append rate (events/s, median; ratio = median of per-run ours/raw)",
            "",
            "| store | events/commit | agentlog ev/s | raw driver | raw ev/s | ours/raw | target |",
            "|---|---:|---:|---|---:|---:|---|",
        ]
        for a in appends:
            ratio = median(a.ratio)
            target = ""
            if a.variant.kind == "sqlite" and a.batch == 1:
                ok = ratio >= TARGET_SQLITE_APPEND
                target = f"≥ {TARGET_SQLITE_APPEND:.2f}: {verdict(ok)}"
                targets.append(
                    f"SQLite ({a.variant.synchronous}) 1-event append ≥ "
                    f"{TARGET_SQLITE_APPEND:.0%} of raw sqlite3: {ratio:.2f} — {verdict(ok)}"
                )
            if a.variant.kind == "postgres" and a.batch == 100:
                ok = ratio >= TARGET_PG_APPEND
                target = f"≥ {TARGET_PG_APPEND:.2f}: {verdict(ok)}"
                targets.append(
                    f"PostgreSQL 100-event append ≥ {TARGET_PG_APPEND:.0%} of raw psycopg: "
                    f"{ratio:.2f} — {verdict(ok)}"
                )
            lines.append(
                f"| {a.variant.label} | {a.batch} | {fmt_rate(median(a.ours))} | "
                f"{a.variant.raw_label} | {fmt_rate(median(a.raw))} | {ratio:.2f} | {target} |"
            )
        lines.append("")

    if rebuilds:
        base = min(r.size for r in rebuilds)
        lines += [
            f"### Rebuild of a run's latest state (ms, median; snapshots every {every} events)",
            "",
            f"| store | events | with snapshots | without | snapshot speed-up "
            f"| t(n)/t({base // 1000}k) with | t(n)/t({base // 1000}k) without |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for rb in rebuilds:
            lines.append(
                f"| {rb.store} | {rb.size:,} | {fmt_ms(median(rb.snap))} | "
                f"{fmt_ms(median(rb.plain))} | {median(rb.speedup):.1f}x | "
                f"{median(rb.snap_ratio):.2f} | {median(rb.plain_ratio):.2f} |"
            )
        big = max(r.size for r in rebuilds)
        for rb in rebuilds:
            if rb.size == big:
                ratio = median(rb.snap_ratio)
                ok = ratio <= TARGET_REBUILD_RATIO
                targets.append(
                    f"{rb.store}: rebuild at {big // 1000}k ≤ {TARGET_REBUILD_RATIO}x the "
                    f"{base // 1000}k time (with snapshots): {ratio:.2f} — {verdict(ok)}"
                )
        lines.append("")

    if sizes:
        lines += [
            "### Bytes stored per event (typical run events, median)",
            "",
            "| store | msgpack payload B/ev | agentlog events table B/ev | raw table B/ev "
            f"| ours/raw | + snapshots every {every} (B/ev) |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        for b in sizes:
            lines.append(
                f"| {b.store} | {b.payload:.0f} | {median(b.ours):.0f} | {median(b.raw):.0f} | "
                f"{median(b.ratio):.2f} | {median(b.snapshots):.0f} |"
            )
        lines.append("")
    return "\n".join(lines), targets


def write_doc(path: Path, body: str) -> None:
    block = f"{BEGIN_MARK}\n{body}\n{END_MARK}"
    if path.exists():
        text = path.read_text()
        if BEGIN_MARK in text and END_MARK in text:
            head, rest = text.split(BEGIN_MARK, 1)
            _, tail = rest.split(END_MARK, 1)
            path.write_text(head + block + tail)
            return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"# Log benchmark\n\n{block}\n")


def machine_note() -> str:
    cpus = os.cpu_count() or 0
    return (
        f"{cpus} cores, noisy (shared VM, other work running); "
        f"{platform.system()} {platform.machine()}, Python {platform.python_version()}, "
        f"SQLite {sqlite3.sqlite_version}, psycopg {psycopg.__version__}"
    )


# --- main ------------------------------------------------------------------------------


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
