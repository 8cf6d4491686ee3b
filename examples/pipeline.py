"""A pipeline of child runs: extract -> transform -> load. Every stage's side effect is
a line appended to an outside file (the "warehouse"), under a business key, so a crash
anywhere, even between an effect and its record, ends with each line written once.

    python examples/pipeline.py              # a SQLite file in a temporary directory
    AGENTLOG_URL=postgresql://... python examples/pipeline.py

The writes' business keys name the batch (``python examples/pipeline.py RUN_ID BATCH``),
so running a batch again writes nothing twice. Kill it while it runs (SIGKILL), then
``agentlog recover`` (same ``AGENTLOG_URL`` and
``PIPELINE_WAREHOUSE``) finishes the parent and the stage that was running; the
finished stages are not run again. tests/test_examples.py does exactly that to the
middle stage. ``PIPELINE_GATE=DIR`` makes the transform stage stop before its second
row, create ``DIR/reached`` and wait for ``DIR/go`` (where a test kills it).
"""

from __future__ import annotations

import fcntl
import os
import sys
import time
from pathlib import Path
from typing import Any

from _store import engine_for

engine = engine_for("pipeline", PIPELINE_WAREHOUSE="warehouse.log")


def warehouse() -> Path:
    return Path(os.environ.get("PIPELINE_WAREHOUSE") or "warehouse.log")


def written(key: str) -> dict[str, str] | None:
    """Is the line of ``key`` in the warehouse? (the verifier of an uncertain write)"""
    if not warehouse().exists():
        return None
    for line in warehouse().read_text().splitlines():
        if line.split(" ", 1)[0] == key:
            return {"key": key}
    return None


def _append(key: str, value: Any) -> dict[str, str]:
    with open(warehouse(), "a") as f:  # one line a write, appended whole
        fcntl.flock(f, fcntl.LOCK_EX)
        f.write(f"{key} {value}\n")
        f.flush()
        os.fsync(f.fileno())
    return {"key": key}


@engine.tool(side_effect=True, key=lambda stage, name, value: f"{stage}:{name}", verify=written)
def write(stage: str, name: str, value: Any, *, idempotency_key: str) -> dict[str, str]:
    return _append(idempotency_key, value)


@engine.tool
def read_source(batch: str, i: int) -> dict[str, Any]:
    return {"name": f"{batch}-{i}", "amount": 10 * (i + 1)}


def _gate(i: int) -> None:
    gate = os.environ.get("PIPELINE_GATE")
    if gate and i == 1:
        Path(gate, "reached").touch()
        deadline = time.monotonic() + 300
        while not Path(gate, "go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)


@engine.agent
def extract(run: Any, batch: str, n: int) -> list[dict[str, Any]]:
    rows = [read_source(batch, i) for i in range(n)]
    write("extract", batch, len(rows))
    return rows


@engine.agent
def transform(run: Any, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, row in enumerate(rows):
        _gate(i)
        cents = row["amount"] * 100
        write("transform", row["name"], cents)
        out.append({"name": row["name"], "cents": cents})
    return out


@engine.agent
def load(run: Any, rows: list[dict[str, Any]]) -> int:
    for row in rows:
        write("load", row["name"], row["cents"])
    return sum(row["cents"] for row in rows)


@engine.agent
def pipeline(run: Any, batch: str, n: int = 3) -> dict[str, Any]:
    rows = run.call(extract, batch=batch, n=n)
    clean = run.call(transform, rows=rows)
    total = run.call(load, rows=clean)
    return {"batch": batch, "rows": len(clean), "total_cents": total}


def main() -> int:
    run_id = sys.argv[1] if len(sys.argv) > 1 else None  # [RUN_ID [BATCH]]
    batch = sys.argv[2] if len(sys.argv) > 2 else "b1"  # the keys: another batch, other keys
    print(f"warehouse {warehouse()}", flush=True)
    result = engine.run(pipeline, run_id=run_id, batch=batch, n=3)
    print(f"pipeline {result.run_id}: {result.status} {result.output}")
    for e in engine.events(result.run_id):
        if e.type in ("child_spawned", "child_finished"):
            print(f"  {e.type:15} {e.data['agent'] if 'agent' in e.data else e.data['status']}")
    print(warehouse().read_text(), end="")
    engine.close()
    return 0 if result.status == "completed" else 1


if __name__ == "__main__":
    sys.exit(main())
