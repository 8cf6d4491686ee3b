"""3. Bytes stored per event: table growth in SQLite and PostgreSQL against a raw
table holding the same rows."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psycopg

from engine import events as ev
from engine.log.history import run_stream
from engine.log.snapshots import save_snapshot
from engine.log.state import RunState, evolve
from engine.store import Append, Store
from engine.store.codec import encode_event

from .log_stores import Env, Raw, RawPostgres, RawSQLite, Variant, open_ours, open_raw
from .log_workload import run_events


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


Meter = Callable[[], int]  # bytes a table (with its indexes) takes now


def _meters(env: Env, kind: str, store: Store, raw: Raw) -> tuple[Meter, Meter, Meter]:
    """Size meters of our events table, our snapshots table and the raw table."""
    if kind == "sqlite":
        assert isinstance(raw, RawSQLite)
        ours_path = Path(store.name.removeprefix("sqlite:///"))
        raw_path = Path(raw.conn.execute("PRAGMA database_list").fetchone()[2])
        return (
            partial(_sqlite_bytes, ours_path, "agentlog_events"),
            partial(_sqlite_bytes, ours_path, "agentlog_snapshots"),
            partial(_sqlite_bytes, raw_path, "raw_events"),
        )
    assert env.pg_base is not None and isinstance(raw, RawPostgres)
    schema = store.name.rsplit("schema=", 1)[1]
    return (
        partial(_pg_bytes, env.pg_base, schema, "agentlog_events"),
        partial(_pg_bytes, env.pg_base, schema, "agentlog_snapshots"),
        partial(_pg_bytes, env.pg_base, raw.schema, "raw_events"),
    )


def _with_snapshots(events: list[ev.Event], every: int) -> tuple[str, list[RunState]]:
    """A run id and the snapshots of its state every ``every`` events."""
    snaps: list[RunState] = []
    state = RunState(run_id=uuid.uuid4().hex)
    for pos, e in enumerate(events, 1):
        state = evolve(state, e, pos)
        if pos % every == 0:
            snaps.append(state)
    return state.run_id, snaps


def _grow(
    env: Env,
    kind: str,
    events: list[ev.Event],
    encoded: list[tuple[str, bytes]],
    run_id: str,
    snaps: list[RunState],
) -> tuple[float, float, float]:
    """Write the run into fresh tables, ours and raw, in 100-event commits: bytes per event
    of our events, of the raw rows, and of our snapshots."""
    n = len(events)
    v = Variant(kind, kind)
    store = open_ours(env, v, "bytes")
    raw = open_raw(env, v, "rawbytes")
    try:
        ours_size, snap_size, raw_size = _meters(env, kind, store, raw)
        o0, s0, w0 = ours_size(), snap_size(), raw_size()
        stream = run_stream(run_id)
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
            save_snapshot(store, stream, s)
        return (ours_size() - o0) / n, (raw_size() - w0) / n, (snap_size() - s0) / n
    finally:
        store.close()
        raw.close()


def bench_bytes(env: Env, kinds: list[str], n: int, repeat: int, every: int) -> list[BytesResult]:
    events = run_events(n)
    encoded = [encode_event(e) for e in events]
    payload = sum(len(p) for _, p in encoded) / n
    run_id, snaps = _with_snapshots(events, every)
    results = []
    for kind in kinds:
        res = BytesResult(kind, payload)
        for r in range(repeat):
            o, w, snap = _grow(env, kind, events, encoded, run_id, snaps)
            res.ours.append(o)
            res.raw.append(w)
            res.ratio.append(o / w)
            res.snapshots.append(snap)
            print(
                f"  bytes {kind:<8} run {r + 1}/{repeat}: ours {res.ours[-1]:.1f} B/ev  raw "
                f"{res.raw[-1]:.1f} B/ev  snapshots +{res.snapshots[-1]:.1f} B/ev",
                flush=True,
            )
        results.append(res)
    return results
