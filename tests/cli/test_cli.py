"""The agentlog command line through a real subprocess, on SQLite and PostgreSQL: every
command, its exit status and its --json shape as CONTRACT.md states them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from test_cli_kit import Workdir, agentlog_many, clean_env, make_workdir, sqlite_url

from engine.store import open_store

RESULT_KEYS = {"run_id", "status", "output", "error"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def work(request: pytest.FixtureRequest, tmp_path: Path) -> Workdir:
    if request.param == "sqlite":
        return make_workdir(tmp_path, sqlite_url(tmp_path))
    return make_workdir(tmp_path, request.getfixturevalue("pg_url"))


def _utc(text: str) -> datetime:
    t = datetime.fromisoformat(text)
    assert t.utcoffset() == timedelta(0), text
    return t


def test_run_show_timeline_checkpoints_state_and_their_json(work: Workdir) -> None:
    """A completed run exits 0 and every reading command shows it in the contract's shape."""
    r = work.ok("run", "agents:hello", "--input", '{"name": "ada"}', "--json")
    doc = r.json()
    assert set(doc) >= RESULT_KEYS
    assert doc["status"] == "completed" and doc["error"] is None
    assert doc["output"] == {"greeting": "hello ada", "closing": "bye"}
    rid = doc["run_id"]
    reads = {  # one process for every read below
        "runs": ["runs", "--json"],
        "timeline --json": ["timeline", rid[:8], "--json"],
        "timeline": ["timeline", rid],
        "checkpoints": ["checkpoints", rid, "--json"],
        "state": ["state", rid, "--json"],
        "state at greeted": ["state", rid, "--at", "greeted", "--json"],
        "show": ["show", rid],
    }
    got = dict(zip(reads, work.many(list(reads.values())), strict=True))
    assert all(r.code == 0 for r in got.values()), got

    runs = got["runs"].json()
    assert [x["run_id"] for x in runs] == [rid]
    row = runs[0]
    assert {"run_id", "agent", "status", "started_at", "updated_at", "parent_run_id"} <= set(row)
    assert row["agent"] == "agents:hello" and row["status"] == "completed"
    assert row["parent_run_id"] is None
    assert _utc(row["started_at"]) <= _utc(row["updated_at"])

    timeline = got["timeline --json"].json()
    assert [e["position"] for e in timeline] == list(range(1, len(timeline) + 1))
    types = [e["type"] for e in timeline]
    assert types[0] == "agent_started" and types[-1] == "agent_finished"
    assert {"plan_created", "tool_invoked", "tool_succeeded", "checkpoint", "llm_decided"} <= set(
        types
    )
    invoked = next(e for e in timeline if e["type"] == "tool_invoked")
    assert invoked["tool"] == "greet" and invoked["args"] == {"name": "ada"}
    for e in timeline:
        _utc(e["at"])

    text = got["timeline"].out
    assert "⏱ saved 1 checkpoint in " in text  # the save timings, told as such
    assert "saves_timed {" not in text

    cps = got["checkpoints"].json()
    assert [c["name"] for c in cps] == ["greeted"]
    assert set(cps[0]) == {"name", "position", "at"}
    assert timeline[cps[0]["position"] - 1]["type"] == "checkpoint"

    state = got["state"].json()
    assert {"run_id", "status", "position", "checkpoints", "output"} <= set(state)
    assert state["run_id"] == rid and state["status"] == "completed"
    assert state["position"] == len(timeline)
    assert state["checkpoints"] == cps
    assert state["output"] == doc["output"]
    assert state["input"] == {"name": "ada"}  # read from agent_started, not the state

    at_cp = got["state at greeted"].json()
    assert at_cp["position"] == cps[0]["position"] and at_cp["status"] == "running"
    assert at_cp["output"] is None
    assert at_cp["checkpoints"] == cps  # the checkpoints up to the state's position
    before = work.ok("state", rid, "--at", str(cps[0]["position"] - 1), "--json").json()
    assert before["checkpoints"] == [] and before["input"] == {"name": "ada"}

    shown = got["show"].out
    assert rid in shown and "completed" in shown and "greeted" in shown
    assert "checkpoint 'greeted'" in text and "plan 2/2" in text and "completed" in text


def test_paused_answered_resumed(work: Workdir) -> None:
    """run exits 3 while waiting; answer continues it to 0; answer to a finished run exits 2;
    resume of a completed run executes nothing and exits 0 with its recorded result."""
    rid = work.run_id("agents:asker", code=3)
    assert work.ok("resume", rid, "--json", code=3).json()["status"] == "paused"
    position = work.ok("state", rid, "--json").json()["position"]
    done = work.ok("answer", rid, '{"ok": true}', "--json-value", "--json").json()
    assert done["status"] == "completed"
    assert done["output"] == {"answer": {"ok": True}, "plan": "a"}
    again = work.ok("resume", rid, "--json").json()
    assert again["output"] == done["output"]
    assert work.ok("state", rid, "--json").json()["position"] > position
    r = work.cli("answer", rid, "late")
    assert r.code == 2 and "not waiting" in r.err


def test_failed_then_abandoned_compensates_once(work: Workdir) -> None:
    """A failed run exits 4; abandon runs compensations once, in reverse order, and exits 4
    every time; abandon of a completed run exits 2."""
    assert work.ok("run", "agents:failing", "--json", code=4).json()["error"]
    booked = work.run_id("agents:booker", code=3)
    assert work.ok("abandon", booked, "--json", code=4).json()["status"] == "abandoned"
    assert work.ok("abandon", booked, code=4)
    assert (work.path / "undone.txt").read_text().split() == ["flight", "hotel"]
    assert work.ok("resume", booked, code=4)
    assert work.ok("runs", "--status", "abandoned", "--json").json()[0]["run_id"] == booked
    completed = work.run_id("agents:hello", code=0)
    r = work.cli("abandon", completed)
    assert r.code == 2 and "completed" in r.err


def test_rewind_forks_with_lineage(work: Workdir) -> None:
    """rewind prints the fork's id, exits with the fork's status, and records lineage."""
    rid = work.run_id("agents:hello", code=0)
    fork = work.ok("rewind", rid, "--to", "greeted", "--json").json()
    assert set(fork) >= RESULT_KEYS and fork["status"] == "completed"
    assert fork["run_id"] != rid
    runs = {r["run_id"]: r for r in work.ok("runs", "--json").json()}
    assert runs[fork["run_id"]]["parent_run_id"] == rid
    assert work.ok("show", rid, "--json").json()["branches"][0]["run_id"] == fork["run_id"]
    assert "forked from" in work.ok("timeline", fork["run_id"]).out
    paused = work.run_id("agents:asker", code=3)
    text = work.ok("rewind", paused, "--to", "2", code=3).out  # a position, as timeline shows
    assert text.startswith("fork ") and "waiting for an answer" in text
    diff = work.ok("diff", rid, fork["run_id"], "--json").json()
    assert "parent_run_id" in diff["state"]


def test_context_is_prompt_ready_text(work: Workdir) -> None:
    """context: goal, plan progress, completed steps with results, pending work."""
    rid = work.run_id("agents:asker", code=3)
    text = work.ok("context", rid).out
    for part in ("## Goal", "agents:asker", "## Completed steps", "decided 'plan'", "approve?"):
        assert part in text, part
    assert work.ok("context", rid, "--json").json()["context"] == text


def test_recover_resumes_runs_whose_process_died(work: Workdir) -> None:
    """A run SIGKILLed mid-call stays running; recover resumes it (exit 0), then has nothing."""
    r = work.cli("run", "agents:crasher", env={"AGENTLOG_FAILPOINTS": "after_tool:2"})
    assert r.code == -signal.SIGKILL
    [running] = work.ok("runs", "--status", "running", "--json").json()
    owner = work.ok("show", running["run_id"], "--json").json()["owner"]
    assert owner is None or owner["alive"] is False
    recovered = work.ok("recover", "--json").json()
    assert [(x["run_id"], x["status"]) for x in recovered] == [(running["run_id"], "completed")]
    assert work.ok("recover", "--json").json() == []
    out = work.ok("state", running["run_id"], "--json").json()["output"]
    assert out == {"a": "hello a", "b": "hello b"}


def test_empty_store_reads_succeed(work: Workdir) -> None:
    """Reading commands on a new store (one that exists and holds no runs) succeed with
    empty results."""
    open_store(work.url).close()
    assert work.ok("runs", "--json").json() == []
    assert "no runs" in work.ok("runs", "--status", "paused").out
    assert work.ok("recover", "--json").json() == []


def test_global_options_before_or_after_the_command(tmp_path: Path) -> None:
    """--url and --json are accepted before or after the command name; --url=URL too."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    rid = work.run_id("agents:hello", code=0)
    argvs = [
        ["--json", "--url", work.url, "state", rid],
        ["state", rid, "--json", "--url", work.url],
        ["--url", work.url, "state", "--json", rid],
        [f"--url={work.url}", "state", rid, "--json"],
    ]
    for args, r in zip(argvs, agentlog_many(argvs, cwd=tmp_path), strict=True):
        assert r.code == 0, (args, r)
        assert r.json()["run_id"] == rid


def test_default_url_is_env_then_local_sqlite(tmp_path: Path) -> None:
    """Without --url the CLI uses $AGENTLOG_URL, else ./agentlog.db in the current directory."""
    work = make_workdir(tmp_path, "")
    r = work.cli("run", "agents:hello", url=False)
    assert r.code == 0 and (tmp_path / "agentlog.db").exists()
    other = sqlite_url(tmp_path, "other.db")
    open_store(other).close()
    env = {"AGENTLOG_URL": other}
    assert work.cli("runs", "--json", url=False, env=env).json() == []
    assert len(work.cli("runs", "--json", url=False).json()) == 1


def test_console_script_and_prefixes(tmp_path: Path) -> None:
    """The installed ``agentlog`` script works; a unique prefix names a run, an ambiguous
    one is refused with exit 2."""
    work = make_workdir(tmp_path, sqlite_url(tmp_path))
    work.ok("run", "agents:hello", "--run-id", "order-1")
    work.ok("run", "agents:hello", "--run-id", "order-2")
    script = os.path.join(os.path.dirname(sys.executable), "agentlog")
    proc = subprocess.run(
        [script, "show", "order-1", "--url", work.url, "--json"],
        cwd=tmp_path,
        env=clean_env(),
        capture_output=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    r = work.cli("show", "order")
    assert r.code == 2 and "ambiguous" in r.err
    assert work.ok("show", "order-2", "--json").json()["run_id"] == "order-2"
