"""The benchmark's Markdown: result tables, the targets met or missed, the block it
rewrites in docs/bench_log.md and a note on the machine."""

from __future__ import annotations

import os
import platform
import sqlite3
from pathlib import Path

import psycopg

from .log_append import AppendResult
from .log_bytes import BytesResult
from .log_rebuild import RebuildResult
from .log_workload import median

BEGIN_MARK = "<!-- bench_log:begin -->"
END_MARK = "<!-- bench_log:end -->"

# Targets the results are reported against.
TARGET_REBUILD_RATIO = 1.5  # t(100k) / t(1k), with snapshots
TARGET_SQLITE_APPEND = 0.5  # ours / raw sqlite3, 1-event commits, same synchronous
TARGET_PG_APPEND = 0.5  # ours / raw psycopg, 100-event commits


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
    """The Markdown tables of the measurements taken, and each target's line (met or not)."""
    lines: list[str] = []
    targets: list[str] = []
    if appends:
        lines += append_table(appends, targets)
    if rebuilds:
        lines += rebuild_table(rebuilds, every, targets)
    if sizes:
        lines += bytes_table(sizes, every)
    return "\n".join(lines), targets


def append_table(appends: list[AppendResult], targets: list[str]) -> list[str]:
    lines = [
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
    return lines


def rebuild_table(rebuilds: list[RebuildResult], every: int, targets: list[str]) -> list[str]:
    base = min(r.size for r in rebuilds)
    lines = [
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
    return lines


def bytes_table(sizes: list[BytesResult], every: int) -> list[str]:
    lines = [
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
    return lines


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
