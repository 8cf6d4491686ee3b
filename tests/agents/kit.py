"""Helpers shared by the runtime tests: a simulated crash, log snapshots, raw stored bytes,
crafted uncertain intents, and running Python in a fresh process."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import psycopg

from engine import Engine
from engine import events as ev
from engine.log.history import RunWriter
from engine.log.state import RunState
from engine.polling import poll_until
from engine.runtime.call import ledger
from engine.runtime.defs.definitions import args_hash, normalize
from engine.secrets import key_check, replay_key

ROOT = Path(__file__).resolve().parents[2]


class Crash(BaseException):
    """Raised inside a tool to leave the run as a killed process would: nothing after the
    raise is recorded, and ``except Exception`` in engine or agent code cannot catch it."""


def log_of(engine: Engine, run_id: str) -> list[tuple[int, str, dict[str, Any]]]:
    """The run's events as comparable tuples."""
    return [(e.position, e.type, e.data) for e in engine.events(run_id)]


def tool_def(fn: Any) -> Any:
    return fn.__agentlog_tool__


def craft_uncertain(
    engine: Engine,
    agent: Any,
    run_id: str,
    input: dict[str, Any],
    tool: Any,
    args: tuple[Any, ...],
) -> str:
    """Write a run whose log ends with the intent of ``tool(*args)`` as its first call and no
    outcome (what a process killed mid-call leaves), claiming a business key as the
    engine would. Returns the call's key."""
    t = tool_def(tool)
    named = normalize(t.bind(args, {}), "args")
    key = str(t.key(*args)) if t.key else f"{run_id}:1"
    writer = RunWriter(engine.store, RunState(run_id=run_id))
    writer.append(
        ev.AgentStarted(
            at=ev.now(),
            agent=agent.name,
            import_path=agent.import_path,
            input=input,
            key_check=key_check(replay_key()),
        )
    )
    ahash = args_hash(t.name, named)
    intent = ev.ToolInvoked(
        at=ev.now(),
        call=1,
        tool=t.name,
        args=t.redacted(named),
        args_hash=ahash,
        key=key,
        side_effect=True,
    )
    extra = []
    if t.key is not None:
        extra.append(
            ledger.claim_event(
                key, ledger.read(engine.store, key).version, run_id, 1, ahash, at=time.time()
            )
        )
    writer.append(intent, extra=extra)
    return key


def stored_bytes(url: str, engine: Engine) -> bytes:
    """Every byte the store holds (files, table rows), for grepping secrets."""
    if url.startswith("memory"):
        store = engine.store
        out = bytearray()
        for name in ("_events", "_snapshots", "_blobs"):
            for row in getattr(store, name)._stored_events:
                out += row.topic.encode() + bytes(row.state)
        return bytes(out)
    if url.startswith("sqlite"):
        path = url.split("?")[0][len("sqlite:///") :]
        out = bytearray()
        for suffix in ("", "-wal", "-shm", "-journal"):
            if os.path.exists(path + suffix):
                out += Path(path + suffix).read_bytes()
        with sqlite3.connect(path) as conn:
            found = conn.execute("SELECT name FROM sqlite_master WHERE type='table'")
            tables = [r[0] for r in found]
            for t in tables:
                for row in conn.execute(f'SELECT * FROM "{t}"'):
                    out += repr(row).encode() + b"".join(
                        v if isinstance(v, bytes) else str(v).encode() for v in row
                    )
        return bytes(out)
    schema = dict(parse_qsl(urlsplit(url).query)).get("schema", "public")
    out = bytearray()
    with psycopg.connect(url.split("?")[0], autocommit=True) as conn:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema=%s", (schema,)
            )
        ]
        assert tables, f"no tables in schema {schema}"
        for t in tables:
            for row in conn.execute(f'SELECT * FROM "{schema}"."{t}"'):
                for v in row:
                    out += bytes(v) if isinstance(v, bytes | memoryview) else str(v).encode()
    return bytes(out)


def python(
    *args: str, env: dict[str, str] | None = None, cwd: str | Path = ROOT, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    """Run ``python *args`` in a fresh process (``cwd`` first on its path, as ``-m`` does)."""
    full = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    full.update(env or {})
    return subprocess.run(
        [sys.executable, *args],
        cwd=str(cwd),
        env=full,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


RESUME = (
    "import json, sys\n"
    "from engine import Engine, Given\n"
    "e = Engine.open(sys.argv[1])\n"
    "# an argument 'given:JSON' is a result a person gives (engine.Given)\n"
    "args = [Given(json.loads(a[6:])) if a.startswith('given:') else a for a in sys.argv[3:]]\n"
    "r = getattr(e, sys.argv[2])(*args)\n"
    "mods = sorted(m for m in sys.modules if m.startswith(('tests', '__agentlog_script')))\n"
    "print(json.dumps({'run_id': r.run_id, 'status': r.status, 'output': r.output,\n"
    "                  'error': r.error, 'waiting': r.waiting, 'modules': mods}))\n"
)


def engine_call(
    url: str, method: str, *args: str, env: dict[str, str] | None = None, cwd: str | Path = ROOT
) -> dict[str, Any]:
    """``Engine.open(url).<method>(*args)`` in a new process that imports no agent module
    itself: the engine finds the agent through the import path its run recorded."""
    p = python("-c", RESUME, url, method, *args, env=env, cwd=cwd)
    assert p.returncode == 0, p.stderr[-3000:]
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


def long_run(url: str, events: int) -> str:
    """A recorded run of ``events`` events, written in a few commits."""
    engine = Engine.open(url)
    rid = uuid.uuid4().hex
    writer = RunWriter(engine.store, RunState(run_id=rid), snapshot_every=1000)
    t = time.time()
    batch: list[ev.Event] = [ev.AgentStarted(at=t, agent="m:a", import_path="m")]
    for call in range(1, (events - 2) // 2 + 1):
        at = t + call / 1000
        batch.append(ev.ToolInvoked(at=at, call=call, tool="lookup", args={"i": call}))
        batch.append(ev.ToolSucceeded(at=at, call=call, tool="lookup", result={"i": call}))
        if len(batch) >= 1000:
            writer.append(*batch)
            batch = []
    writer.append(*batch, ev.AgentFinished(at=t + 10, output={"ok": True}))
    engine.close()
    return rid


def wait_until(found: Callable[[], Any], what: str, wait: float = 20.0) -> Any:
    """Poll ``found`` until it is truthy (a bounded wait for another thread or process)."""
    value = poll_until(lambda: found() or None, wait, first=0.005, most=0.05)  # truthy
    assert value, f"timed out waiting for {what}"
    return value


OPEN_WHEN_TOLD = """
import sys, time
from pathlib import Path
from engine.store import open_store
go = Path(sys.argv[2])
while not go.exists():
    time.sleep(0.001)
open_store(sys.argv[1]).close()
"""


def open_at_once(url: str, tmp_path: Path, processes: int = 4) -> None:
    """Open the store at ``url`` from ``processes`` fresh processes at the same moment
    (each waits for a file, then opens and closes it); each must open it."""
    go = tmp_path / "go"
    openers = [
        subprocess.Popen(
            [sys.executable, "-c", OPEN_WHEN_TOLD, url, str(go)],
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(processes)
    ]
    go.touch()
    for p in openers:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
