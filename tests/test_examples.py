"""The topologies in examples/, each run as the script it is (a real subprocess) on a
SQLite file and on PostgreSQL: a supervisor whose crashing worker is restarted, a
pipeline whose middle stage is SIGKILLed and finished by ``agentlog recover`` with
every effect once, and two peers negotiating by messages under a fenced lock."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import uuid
from collections import Counter
from contextlib import closing
from pathlib import Path
from typing import Any

from conftest import backends

from engine import Engine
from engine.polling import poll_until

ROOT = Path(__file__).resolve().parents[1]
EXAMPLES = ROOT / "examples"
HANG = 300  # seconds: only so that a broken example cannot hang the suite


def _env(url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    return {**env, "AGENTLOG_URL": url, **extra}


def _example(name: str, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(EXAMPLES / name), *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "replay", *args]
    return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=HANG, cwd=ROOT)


def _children(engine: Engine, run_id: str) -> list[str]:
    """The children a run spawned (and restarted), in its log's order."""
    kinds = ("child_spawned", "child_restarted")
    ids = [e.data["child_run_id"] for e in engine.events(run_id) if e.type in kinds]
    return list(dict.fromkeys(ids))


def _agent(engine: Engine, run_id: str) -> str:
    return str(engine.events(run_id)[0].data["agent"]).rsplit(":", 1)[-1]


@backends("sqlite", "postgres")
def test_supervisor_restarts_the_crashed_worker_and_the_team_completes(store_url: str) -> None:
    """examples/supervisor.py: the flaky worker fails once, the one_for_one supervisor
    restarts it (one child_restarted, with its reason), its recorded work is not redone,
    and the team completes with every worker's total; the tree printed at the end names
    the team and its three workers."""
    p = _example("supervisor.py", _env(store_url))
    assert p.returncode == 0, p.stdout + p.stderr
    assert "tool calls made: 6 " in p.stdout, p.stdout  # 6 items, none redone
    with closing(Engine.open(store_url)) as engine:
        (team,) = [r.run_id for r in engine.runs() if r.agent.endswith(":team")]
        state = engine.state(team)
        assert state.status == "completed"
        assert state.output == {"steady": 14, "flaky": 41, "quick": 36}
        restarts = [e.data for e in engine.events(team) if e.type == "child_restarted"]
        assert len(restarts) == 1 and restarts[0]["strategy"] == "one_for_one"
        assert "crashed" in restarts[0]["reason"]
        workers = _children(engine, team)
        assert len(workers) == 3
        flaky = restarts[0]["child_run_id"]
        assert "agent_failed" in [e.type for e in engine.events(flaky)]
        for w in workers:
            assert engine.state(w).status == "completed"
            assert engine.state(w).parent_run_id == team
    for run_id in (team, *workers):
        assert run_id in p.stdout, p.stdout  # agentlog tree RUN printed the whole tree


def _pipeline_ids(engine: Engine, run_id: str) -> dict[str, str]:
    return {_agent(engine, c): c for c in _children(engine, run_id)}


def _kill_mid_transform(env: dict[str, str], run_id: str, batch: str, gate: Path | None) -> None:
    """Start examples/pipeline.py and see it die by SIGKILL inside the transform stage:
    at its failpoint (``env``) or, with ``gate``, killed from here while it waits there."""
    cmd = [sys.executable, str(EXAMPLES / "pipeline.py"), run_id, batch]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if gate is not None:
        reached = poll_until(lambda: (gate / "reached").exists() or proc.poll() is not None, HANG)
        assert reached, "the transform stage never reached its gate"
        proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]


@backends("sqlite", "postgres")
def test_pipeline_killed_in_its_middle_stage_is_finished_by_recover_with_effects_once(
    store_url: str, tmp_path: Path
) -> None:
    """examples/pipeline.py SIGKILLed on two batches: once at the failpoint after the
    transform stage's second write ran but before its outcome was recorded, once from
    outside while that stage waits at its gate. ``agentlog recover`` finishes the
    pipeline each time: extract untouched (not one event more), transform and load done,
    every warehouse line written exactly once, the output right."""
    warehouse = tmp_path / "warehouse.log"
    gate = tmp_path / "gate"
    gate.mkdir()
    cases = [
        ("b1", {"AGENTLOG_FAILPOINTS": "after_tool:6"}, None, "transform:b1-1"),
        ("b2", {"PIPELINE_GATE": str(gate)}, gate, "transform:b2-0"),
    ]
    env = _env(store_url, PIPELINE_WAREHOUSE=str(warehouse))
    for batch, extra, gated, last in cases:
        run_id = f"pipeline-{uuid.uuid4().hex[:8]}"
        _kill_mid_transform({**env, **extra}, run_id, batch, gated)
        lines = [ln.split()[0] for ln in warehouse.read_text().splitlines()]
        assert lines[-1] == last, lines
        with closing(Engine.open(store_url)) as engine:
            stages = _pipeline_ids(engine, run_id)
            assert set(stages) == {"extract", "transform"}, stages
            assert engine.state(stages["transform"]).status == "running"
            extract_events = len(engine.events(stages["extract"]))
        p = _cli(env, "recover")
        assert p.returncode == 0, p.stdout + p.stderr
        with closing(Engine.open(store_url)) as engine:
            state = engine.state(run_id)
            assert state.status == "completed", (state.status, state.error)
            assert state.output == {"batch": batch, "rows": 3, "total_cents": 6000}
            stages = _pipeline_ids(engine, run_id)
            assert set(stages) == {"extract", "transform", "load"}
            assert len(engine.events(stages["extract"])) == extract_events
            assert all(engine.state(c).status == "completed" for c in stages.values())
    keys = Counter(line.split()[0] for line in warehouse.read_text().splitlines())
    want = [
        f"{stage}:{batch}" if stage == "extract" else f"{stage}:{batch}-{i}"
        for batch in ("b1", "b2")
        for stage in ("extract", "transform", "load")
        for i in range(1 if stage == "extract" else 3)
    ]
    assert keys == Counter(want), keys


@backends("sqlite", "postgres")
def test_peers_negotiate_by_messages_and_sign_under_a_fenced_lock(
    store_url: str, tmp_path: Path
) -> None:
    """examples/peers.py: buyer and seller agree on a price by messages (each consumed
    once), each signs in the outside registry holding the lock ``deal`` with its fence
    (the seller's after the buyer's, so strictly greater), and no lock is left held."""
    registry = tmp_path / "registry.jsonl"
    env = _env(store_url, PEERS_REGISTRY=str(registry))
    p = _example("peers.py", env)
    assert p.returncode == 0, p.stdout + p.stderr
    entries = [json.loads(line) for line in registry.read_text().splitlines()]
    assert [e["party"] for e in entries] == ["buyer", "seller"]
    assert entries[0]["fence"] < entries[1]["fence"]
    assert entries[0]["price"] == entries[1]["price"] >= 90
    with closing(Engine.open(store_url)) as engine:
        (market,) = [r.run_id for r in engine.runs() if r.agent.endswith(":market")]
        assert engine.state(market).status == "completed"
        for peer in _children(engine, market):
            events = engine.events(peer)
            got = [e.data["message_id"] for e in events if e.type == "message_received"]
            assert got and None not in got and len(got) == len(set(got))
            fences = [e.data["fence"] for e in events if e.type == "lock_acquired"]
            assert len(fences) == 1
        output: Any = engine.state(market).output
        assert [o["fence"] for o in output] == [entries[1]["fence"], entries[0]["fence"]]
    held = _cli(env, "locks", "--json")
    assert held.returncode == 0 and json.loads(held.stdout) == [], held.stdout + held.stderr
