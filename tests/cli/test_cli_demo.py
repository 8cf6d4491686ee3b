"""``agentlog demo`` tells its story end to end, and a long timeline streams fast."""

from __future__ import annotations

import io
import json
import re
import sys
from pathlib import Path

import pytest
from agents.kit import long_run
from test_cli_kit import Workdir, agentlog, sqlite_url

from replay.cli.entry import run_cli


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
def test_the_demo_records_its_two_runs_on_postgres(tmp_path: Path, pg_url: str) -> None:
    r = agentlog("demo", "--url", pg_url, cwd=tmp_path)
    assert r.code == 0, r
    assert len(Workdir(tmp_path, pg_url).ok("runs", "--json").json()) == 2


def test_a_10000_event_timeline_prints_every_event(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The timeline of a 10,000-event run prints every event, as text and as JSON (its
    speed is measured by scripts/bench_timeline.py, against a raw read in the same run)."""
    url = sqlite_url(tmp_path)
    rid = long_run(url, 10_000)
    for args in (["timeline", rid], ["timeline", rid, "--json"]):
        buf = io.StringIO()
        monkeypatch.setattr(sys, "stdout", buf)
        code = run_cli([*args, "--url", url])
        monkeypatch.undo()
        assert code == 0
        out = buf.getvalue()
        if "--json" in args:
            assert [e["position"] for e in json.loads(out)] == list(range(1, 10_001))
        else:
            rows = re.findall(r"^ *(\d+) +\d\d:\d\d:\d\d", out, re.MULTILINE)
            assert [int(n) for n in rows] == list(range(1, 10_001))
    r = agentlog("timeline", rid[:6], "--url", url, cwd=tmp_path)
    assert r.code == 0 and "10000 events" in r.out
