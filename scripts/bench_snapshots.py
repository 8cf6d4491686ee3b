#!/usr/bin/env python
"""Benchmark bounded snapshots: the bytes of snapshots a run leaves after many checkpoints,
against the bytes of its events.

A real agent records ``--checkpoints`` checkpoints (default 2,000) through ``Engine.run``,
once with distinct names and once repeating one name, on SQLite and PostgreSQL. Each case
gets a fresh store; the sizes are read from the tables themselves: the stored payloads
(SQLite ``sum(length(state))``, PostgreSQL ``sum(octet_length(state))``) and, on
PostgreSQL, ``pg_total_relation_size`` (rows, indexes and TOAST). The bound is snapshot
payload bytes <= 2x event payload bytes. Timings, each the median of ``--repeat`` runs in
this process: the agent's run (one commit per checkpoint), ``state`` (latest: rebuild)
and ``state --at NAME`` (the first name, or the repeated one: its latest occurrence).

Usage::

    python scripts/bench_snapshots.py                    # writes docs/bench_snapshots.md
    python scripts/bench_snapshots.py --stores sqlite --no-write
    PYTHONPATH=/path/to/older/checkout python scripts/bench_snapshots.py --no-write

The script uses only ``Engine.run`` and ``Engine.state``, so it also measures an older
checkout (the last line). PostgreSQL cases run in schemas ``bench_snap_<random>``,
dropped at the end.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import platform
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from benchkit import PG_URL  # this directory: the shared PostgreSQL default

import engine
from engine import Engine

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOC = ROOT / "docs" / "bench_snapshots.md"
DEFAULT_PG = PG_URL
BEGIN_MARK = "<!-- bench_snapshots:begin -->"
END_MARK = "<!-- bench_snapshots:end -->"
BOUND = 2.0  # snapshot bytes / event bytes
TABLES = ("agentlog_events", "agentlog_snapshots", "agentlog_blobs")


def many(run: Any, n: int, repeat: bool) -> int:
    """The benchmark's agent: ``n`` checkpoints, distinct names or one name repeated."""
    for i in range(n):
        run.checkpoint("again" if repeat else f"step-{i:05d}")
    return n


@dataclass
class Case:
    store: str
    names: str  # "distinct" or "repeated"
    events: int = 0
    snapshots: int = 0
    bytes: dict[str, int] = field(default_factory=dict)  # table -> payload bytes
    relation: dict[str, int] = field(default_factory=dict)  # table -> pg_total_relation_size
    run_s: list[float] = field(default_factory=list)
    state_s: list[float] = field(default_factory=list)
    at_name_s: list[float] = field(default_factory=list)

    @property
    def ratio(self) -> float:
        snap = self.bytes["agentlog_snapshots"] + self.bytes["agentlog_blobs"]
        return snap / max(1, self.bytes["agentlog_events"])


class Backend:
    """Fresh stores of one kind, and the sizes of their tables."""

    def __init__(self, kind: str, pg_url: str, tmp: Path) -> None:
        self.kind, self.pg_url, self.tmp = kind, pg_url, tmp
        self.schemas: list[str] = []

    def fresh(self) -> str:
        tag = uuid.uuid4().hex[:10]
        if self.kind == "sqlite":
            return f"sqlite:///{self.tmp}/snap_{tag}.db"
        schema = f"bench_snap_{tag}"
        self.schemas.append(schema)
        sep = "&" if "?" in self.pg_url else "?"
        return f"{self.pg_url}{sep}schema={schema}"

    def sizes(self, url: str) -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
        """Per table: row count, payload bytes and (PostgreSQL) total relation size."""
        rows, payload, relation = {}, {}, {}
        if self.kind == "sqlite":
            with sqlite3.connect(url[len("sqlite:///") :]) as conn:
                for t in TABLES:
                    n, b = conn.execute(f"SELECT count(*), sum(length(state)) FROM {t}").fetchone()
                    rows[t], payload[t] = n, b or 0
            return rows, payload, relation
        schema = url.rsplit("schema=", 1)[1]
        with psycopg.connect(self.pg_url.split("?")[0], autocommit=True) as conn:
            for t in TABLES:
                q = f'SELECT count(*), sum(octet_length(state)) FROM "{schema}".{t}'
                n, b = conn.execute(q).fetchone() or (0, 0)
                rows[t], payload[t] = n, b or 0
                size = conn.execute(
                    "SELECT pg_total_relation_size(%s::regclass)", (f'"{schema}".{t}',)
                ).fetchone()
                relation[t] = size[0] if size else 0
        return rows, payload, relation

    def drop(self) -> None:
        if not self.schemas:
            return
        with psycopg.connect(self.pg_url.split("?")[0], autocommit=True) as conn:
            for schema in self.schemas:
                conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def timed(fn: Callable[[], Any]) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def measure(backend: Backend, names: str, n: int, repeat: int) -> Case:
    case = Case(backend.kind, names)
    for i in range(repeat):
        url = backend.fresh()
        one_run(case, url, n)
        if i == 0:
            rows, case.bytes, case.relation = backend.sizes(url)
            case.events, case.snapshots = rows["agentlog_events"], rows["agentlog_snapshots"]
    return case


def one_run(case: Case, url: str, n: int) -> None:
    """Run the agent in a fresh store, then read its state: latest, and at a name."""
    eng = Engine.open(url)
    try:
        agent = eng.agent(many, name="bench_snapshots:many")
        rid = uuid.uuid4().hex
        repeat = case.names != "distinct"
        case.run_s.append(timed(lambda: eng.run(agent, run_id=rid, n=n, repeat=repeat)))
        name = "again" if repeat else "step-00000"
        case.state_s.append(timed(lambda: eng.state(rid)))
        case.at_name_s.append(timed(lambda: eng.state(rid, at=name)))
    finally:
        eng.close()


def median_ms(xs: list[float]) -> str:
    return f"{statistics.median(xs) * 1000:.1f}"


def kib(b: int) -> str:
    return f"{b / 1024:,.1f}"


def report(cases: list[Case], n: int, repeat: int, took: float) -> str:
    lines = [
        f"Command: `python scripts/bench_snapshots.py --checkpoints {n} --repeat {repeat}`  ",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC  ",
        f"Machine: {os.cpu_count()} cores, shared; {platform.system()} {platform.machine()}, "
        f"Python {platform.python_version()}, SQLite {sqlite3.sqlite_version}  ",
        f"Code: {Path(engine.__file__).resolve().parent.parent}; total runtime {took:.0f} s",
        "",
        f"### Stored bytes after {n:,} checkpoints (payloads; KiB)",
        "",
        "| store | names | events | event KiB | snapshots | snapshot KiB | blob KiB "
        f"| snapshot/event | bound ≤ {BOUND:.0f}x | PG relation KiB (events / snapshots) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|",
    ]
    for c in cases:
        rel = (
            f"{kib(c.relation['agentlog_events'])} / {kib(c.relation['agentlog_snapshots'])}"
            if c.relation
            else ""
        )
        lines.append(
            f"| {c.store} | {c.names} | {c.events:,} | {kib(c.bytes['agentlog_events'])} "
            f"| {c.snapshots:,} | {kib(c.bytes['agentlog_snapshots'])} "
            f"| {kib(c.bytes['agentlog_blobs'])} | {c.ratio:.3f} "
            f"| {'met' if c.ratio <= BOUND else 'NOT met'} | {rel} |"
        )
    lines += [
        "",
        f"### Time (ms, median of {repeat})",
        "",
        "| store | names | run (all checkpoints) | per checkpoint | state (latest) "
        "| state --at NAME |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for c in cases:
        per = statistics.median(c.run_s) * 1000 / n
        lines.append(
            f"| {c.store} | {c.names} | {median_ms(c.run_s)} | {per:.2f} "
            f"| {median_ms(c.state_s)} | {median_ms(c.at_name_s)} |"
        )
    return "\n".join(lines) + "\n"


def write_doc(path: Path, body: str) -> None:
    text = path.read_text(encoding="utf-8")
    head, _, rest = text.partition(BEGIN_MARK)
    _, _, tail = rest.partition(END_MARK)
    path.write_text(f"{head}{BEGIN_MARK}\n{body}{END_MARK}{tail}", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--checkpoints", type=int, default=2000)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--stores", default="sqlite,postgres")
    p.add_argument("--pg-url", default=DEFAULT_PG)
    p.add_argument("--out", type=Path, default=DEFAULT_DOC)
    p.add_argument("--no-write", action="store_true")
    args = p.parse_args(argv)
    start = time.perf_counter()
    cases = []
    with tempfile.TemporaryDirectory(prefix="bench_snap_") as tmp:
        for kind in args.stores.split(","):
            backend = Backend(kind, args.pg_url, Path(tmp))
            try:
                for names in ("distinct", "repeated"):
                    case = measure(backend, names, args.checkpoints, args.repeat)
                    print(f"  {kind} {names}: snapshot/event {case.ratio:.3f}", file=sys.stderr)
                    cases.append(case)
            finally:
                backend.drop()
    body = report(cases, args.checkpoints, args.repeat, time.perf_counter() - start)
    print(body)
    if not args.no_write:
        write_doc(args.out, body)
    return 0 if all(c.ratio <= BOUND for c in cases) else 1


if __name__ == "__main__":
    sys.exit(main())
