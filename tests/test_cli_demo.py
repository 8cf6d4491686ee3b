"""``agentlog demo`` tells its story end to end, and a long timeline streams fast."""

from __future__ import annotations

import io
import json
import sys
import time
import uuid
from pathlib import Path

import pytest
from test_cli_kit import Workdir, agentlog, sqlite_url

from engine import Engine
from engine import events as ev
from engine.history import RunWriter
from engine.state import RunState
from replay.cli import run_cli


def test_demo_crashes_resumes_without_charging_twice_and_rewinds(tmp_path: Path) -> None:
    """On the default embedded store: a child is SIGKILLed mid-payment, the run resumes
    with exactly one charge, a fork branches from a checkpoint, and the tour ends with
    commands to try that name the real runs."""
    r = agentlog("demo", cwd=tmp_path)
    assert r.code == 0, r
    assert "killed by SIGKILL" in r.out and "charged exactly once" in r.out
    assert (tmp_path / "agentlog.db").exists()
    world = json.loads((tmp_path / "agentlog-demo-payments.json").read_text())
    assert len(world["charges"]) == 1

    work = Workdir(tmp_path, sqlite_url(tmp_path))
    runs = work.ok("runs", "--json").json()
    assert len(runs) == 2 and all(x["status"] == "completed" for x in runs)
    [fork] = [x for x in runs if x["parent_run_id"]]
    original = fork["parent_run_id"]
    assert f"agentlog diff {original[:8]} {fork['run_id'][:8]}" in r.out
    assert "verified: the effect had already happened" in r.out  # the timeline's story

    events = work.ok("timeline", original, "--json").json()
    resumed = [e for e in events if e["type"] == "agent_resumed"]
    charged = [e for e in events if e["type"] == "tool_succeeded" and e["tool"] == "charge_card"]
    assert len(resumed) == 1 and [c["source"] for c in charged] == ["verified"]
    work.ok("verify", original[:8])
    work.ok("verify", fork["run_id"])
    assert work.ok("diff", original, fork["run_id"], "--json").json()["calls"]
    assert len(json.loads((tmp_path / "agentlog-demo-payments.json").read_text())["charges"]) == 1


@pytest.mark.postgres
def test_demo_on_postgres(tmp_path: Path, pg_url: str) -> None:
    r = agentlog("demo", "--url", pg_url, cwd=tmp_path)
    assert r.code == 0, r
    assert len(Workdir(tmp_path, pg_url).ok("runs", "--json").json()) == 2


def _long_run(url: str, events: int) -> str:
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


def test_a_10000_event_timeline_prints_in_under_a_second(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeline streams line by line: 10,000 events in under 1 s (store open included)."""
    url = sqlite_url(tmp_path)
    rid = _long_run(url, 10_000)
    for args in (["timeline", rid], ["timeline", rid, "--json"]):
        buf = io.StringIO()
        monkeypatch.setattr(sys, "stdout", buf)
        started = time.perf_counter()
        code = run_cli([*args, "--url", url])
        elapsed = time.perf_counter() - started
        monkeypatch.undo()
        assert code == 0
        assert buf.getvalue().count("\n") >= 10_000
        assert elapsed < 1.0, f"{args}: {elapsed:.2f} s"
    r = agentlog("timeline", rid[:6], "--url", url, cwd=tmp_path)
    assert r.code == 0 and "10000 events" in r.out
