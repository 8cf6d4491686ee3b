"""Where the time of one keyed side-effecting call goes: scripts/bench_steps.py --profile.

Each layer of the call's path is wrapped by a timer (a wrapper costs ~0.2 us, small next to
what it measures) and the run's time is split into exclusive parts: the runtime's Python
outside the commit, the run context's record (scrub, guards, locks, log), the writer's fold
and index row, the store facade (encode, seal checks, rows), the recorder's transaction and
pool context managers, the SQL statements and the commit (the fsync). The sum is the run's
wall time; a part is ``ms/call`` and its share.
"""

from __future__ import annotations

import functools
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable
from typing import Any

Spent = dict[str, float]


def _timed(spent: Spent, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        began = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[name] += time.perf_counter() - began

    return wrapper


def _patch(spent: Spent, undo: list[Callable[[], None]], owner: Any, attr: str, name: str) -> None:
    original = getattr(owner, attr)
    setattr(owner, attr, _timed(spent, name, original))
    undo.append(lambda: setattr(owner, attr, original))


def _wrap_backend(spent: Spent, undo: list[Callable[[], None]], postgres: bool) -> None:
    if postgres:
        import psycopg

        _patch(spent, undo, psycopg.Cursor, "execute", "sql")  # a round trip, commit in it
        return
    from eventsourcing import sqlite as es

    _patch(spent, undo, es.SQLiteCursor, "execute", "sql")
    _patch(spent, undo, es.SQLiteConnection, "commit", "commit")


def _layers(spent: Spent, undo: list[Callable[[], None]], postgres: bool) -> None:
    from engine import failpoints
    from engine.log.history import RunWriter
    from engine.runtime.run.context import RunContext
    from engine.store import base

    _patch(spent, undo, RunContext, "record", "record")
    _patch(spent, undo, RunWriter, "append", "writer")
    _patch(spent, undo, RunWriter, "_snapshot", "snapshot")
    _patch(spent, undo, base.Store, "append", "store")
    _patch(spent, undo, base, "encode_event", "encode")
    _patch(spent, undo, failpoints, "hit", "failpoints")
    _wrap_backend(spent, undo, postgres)


def _agent(url: str) -> tuple[Any, Any]:
    from engine import Engine

    engine = Engine.open(url)

    @engine.tool(side_effect=True, name="bench_tool_keyed")
    def keyed_tool(i: int, *, idempotency_key: str) -> dict[str, int]:
        return {"i": i, "v": i * 2}

    @engine.agent(name="bench:profile")
    def agent(run: Any, steps: int) -> int:
        return len([keyed_tool(i) for i in range(steps)])

    return engine, agent


def breakdown(url: str, steps: int, recorder: Any = None) -> dict[str, float]:
    """Milliseconds per call of each exclusive part of ``steps`` keyed calls at ``url``."""
    engine, agent = _agent(url)
    engine.run(agent, steps=5)  # warm: schema, pools, imports
    spent: Spent = defaultdict(float)
    undo: list[Callable[[], None]] = []
    _layers(spent, undo, url.startswith("postgres"))
    store = engine.store
    _patch(spent, undo, store._events, "insert_events", "recorder")
    try:
        began = time.perf_counter()
        engine.run(agent, steps=steps)
        total = time.perf_counter() - began
    finally:
        for u in reversed(undo):
            u()
    s = spent
    inner = s["sql"] + s["commit"]
    parts = {
        "runtime outside the commit (wrapper, identity, args hash, policies, "
        "invoke, outcome, call state)": total - s["record"] - s["failpoints"],
        "failpoints": s["failpoints"],
        "run context record (scrub, guards, lease check, lock, log line)": s["record"]
        - s["writer"],
        "writer: fold, index row": s["writer"] - s["store"] - s["snapshot"],
        "writer: snapshots (every 100 events)": s["snapshot"],
        "store facade: seal/size checks, rows": s["store"] - s["recorder"] - s["encode"],
        "encode (msgspec)": s["encode"],
        "recorder: eventsourcing transaction + pool context managers": s["recorder"] - inner,
        "SQL statements (sqlite: BEGIN, 2 inserts, upsert, epoch check)"
        if not url.startswith("postgres")
        else "round trip: the append function (commit included)": s["sql"],
    }
    if not url.startswith("postgres"):
        parts["commit (the fsync)"] = s["commit"]
    engine.close()
    return {k: v / steps * 1000 for k, v in parts.items()} | {"total": total / steps * 1000}


def profile_table(pg_url: str, stores: list[str], steps: int, repeat: int) -> list[str]:
    """The breakdown of each store as Markdown, medians of ``repeat`` runs."""
    import statistics

    lines = [
        f"Where the time of one keyed side-effecting call goes, ms/call (median of {repeat} "
        f"runs x {steps} calls). Command: `python scripts/bench_steps.py --profile "
        f"--repeat {repeat} --steps {steps}`",
        "",
        "| part | " + " | ".join(stores) + " |",
        "|---|" + "---:|" * len(stores),
    ]
    tmp = tempfile.mkdtemp(prefix="agentlog-profile-")
    found: dict[str, list[dict[str, float]]] = {s: [] for s in stores}
    for r in range(repeat):
        for store in stores:
            url = f"sqlite:///{tmp}/p{r}.db" if store == "sqlite" else pg_url
            found[store].append(breakdown(url, steps))
    names = [k for k in dict.fromkeys(k for r in found.values() for k in r[0]) if k != "total"]
    names.append("total")
    for name in names:
        cells = []
        for store in stores:
            runs = found[store]
            med = statistics.median(run.get(name, 0.0) for run in runs)
            total = statistics.median(run["total"] for run in runs)
            cells.append(f"{med:.4f} ({med / total:.0%})" if name in runs[0] else "")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return lines
