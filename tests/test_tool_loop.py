"""examples/tool_loop.py, an OpenAI-style tool-calling loop, run as the script it is (a
real subprocess) on a SQLite file and on PostgreSQL, SIGKILLed mid-loop and finished by
a resume in a new process: the refund reaches the outside payments service once, the
scripted model (an ``@engine.model`` whose first request gets a 429, retried) is not
asked again for a turn the log already holds, and the answer is right. In this process
too (memory, SQLite, PostgreSQL): the loop, and a rewind of it."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import uuid
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from conftest import all_backends, backends

from engine import Engine
from engine.polling import poll_until

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "tool_loop.py"
HANG = 300  # seconds: only so that a broken example cannot hang the suite
ANSWERS = {
    "o-17": "Refunded 12.50 for order o-17; your store credit is now 37.50.",
    "o-18": "Refunded 9.90 for order o-18; your store credit is now 34.90.",
}
TOKENS = [(60, 25), (120, 25), (210, 25)]  # the scripted model's usage, turn by turn
FIRST = ["turn 1: 429", "turn 1"]  # the model's first request is refused once (429)


def _env(url: str, tmp: Path, order: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "AGENTLOG_FAILPOINTS"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])  # this engine
    files = {
        "TOOL_LOOP_PAYMENTS": str(tmp / "payments.log"),
        "TOOL_LOOP_CALLS": str(tmp / f"calls-{order}.log"),
    }
    return {**env, "AGENTLOG_URL": url, **files, **extra}


def _killed(env: dict[str, str], run_id: str, order: str, gate: Path, at: str) -> None:
    """Start the example and SIGKILL it from here while it waits at its gate ``at``."""
    cmd = [sys.executable, str(SCRIPT), run_id, order]
    env = {**env, "TOOL_LOOP_GATE": str(gate), "TOOL_LOOP_GATE_AT": at}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    reached = poll_until(lambda: (gate / "reached").exists() or proc.poll() is not None, HANG)
    assert reached, f"the example never reached its gate {at!r}"
    proc.send_signal(signal.SIGKILL)
    _, err = proc.communicate(timeout=HANG)
    assert proc.returncode == -signal.SIGKILL, err.decode()[-2000:]


def _run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], env=env, capture_output=True, text=True, timeout=HANG, cwd=ROOT
    )


def _payments(tmp: Path) -> list[str]:
    """The keys of the refund requests the payments service received, in order."""
    path = tmp / "payments.log"
    return [json.loads(line)["key"] for line in path.read_text().splitlines()]


def _calls(env: dict[str, str]) -> list[str]:
    return Path(env["TOOL_LOOP_CALLS"]).read_text().splitlines()


def _check_finished(url: str, run_id: str, order: str) -> None:
    """The run completed with the right answer after three recorded model turns (each
    with the tokens its response reported), the first one's 429 retried once, and the
    refund's outcome recorded once."""
    with closing(Engine.open(url)) as engine:
        state = engine.state(run_id)
        assert state.status == "completed", (state.status, state.error)
        assert state.output == {"answer": ANSWERS[order], "turns": 3}
        events = engine.events(run_id)
        decided = [e.data for e in events if e.type == "llm_decided"]
        assert [d["name"] for d in decided] == ["chat"] * 3
        assert [(d["tokens_in"], d["tokens_out"]) for d in decided] == TOKENS
        failed = [e.data for e in events if e.type == "tool_failed"]
        assert [(f["tool"], f["kind"], f["decision"]) for f in failed] == [
            ("chat", "transient", True)
        ]
        assert "429" in failed[0]["message"]
        assert [e.type for e in events].count("retry_scheduled") == 1
        refunds = [e for e in events if e.type == "tool_succeeded" and "refund" in str(e.data)]
        assert len(refunds) == 1, [e.data for e in refunds]


@backends("sqlite", "postgres")
def test_killed_after_the_refund_was_sent_resume_sends_nothing_twice(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILLed after the refund request reached the payments service but before its
    outcome was recorded: ``agentlog resume`` verifies the refund with
    the payments service instead of sending it again, asks the model only for the turn
    it has no record of (the third), and completes with the right answer."""
    run_id, order = f"loop-{uuid.uuid4().hex[:8]}", "o-17"
    env = _env(store_url, tmp_path, order)
    gate = tmp_path / "gate"
    gate.mkdir()
    _killed(env, run_id, order, gate, "refund")
    assert _payments(tmp_path) == ["refund:o-17"]
    assert _calls(env) == [*FIRST, "turn 2"]
    with closing(Engine.open(store_url)) as engine:
        assert engine.state(run_id).status == "running"  # its process died mid-loop
    p = _run(env, "-m", "replay", "resume", run_id)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _payments(tmp_path) == ["refund:o-17"]  # verified, not sent again
    assert _calls(env) == [*FIRST, "turn 2", "turn 3"]
    _check_finished(store_url, run_id, order)
    p = _run(env, "-m", "replay", "verify", run_id)
    assert p.returncode == 0, p.stdout + p.stderr  # the log replays against the code


@backends("sqlite", "postgres")
def test_killed_while_the_model_thinks_resume_asks_only_the_unrecorded_turn_again(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILLed from outside during the model's third turn (its gate): the same script
    run again with the run's id continues it; turns one and two come from the log (the
    model is not asked again), the third is asked again (nothing of it was recorded),
    the tools' recorded results are reused and the refund stays one request."""
    run_id, order = f"loop-{uuid.uuid4().hex[:8]}", "o-18"
    gate = tmp_path / "gate"
    gate.mkdir()
    env = _env(store_url, tmp_path, order)
    _killed(env, run_id, order, gate, "answer")
    assert _payments(tmp_path) == ["refund:o-18"]
    assert _calls(env) == [*FIRST, "turn 2", "turn 3"]
    p = _run(env, str(SCRIPT), run_id, order)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ANSWERS[order] in p.stdout
    assert _payments(tmp_path) == ["refund:o-18"]
    assert _calls(env) == [*FIRST, "turn 2", "turn 3", "turn 3"]
    _check_finished(store_url, run_id, order)


def _example_module(monkeypatch: pytest.MonkeyPatch, url: str, tmp: Path) -> Any:
    """examples/tool_loop.py imported in this process, on the store ``url``."""
    monkeypatch.setenv("AGENTLOG_URL", url)
    monkeypatch.setenv("TOOL_LOOP_PAYMENTS", str(tmp / "payments.log"))
    monkeypatch.setenv("TOOL_LOOP_CALLS", str(tmp / "calls.log"))
    monkeypatch.syspath_prepend(str(SCRIPT.parent))
    name = f"tool_loop_{uuid.uuid4().hex[:8]}"
    spec = importlib.util.spec_from_file_location(name, SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, name, module)
    spec.loader.exec_module(module)
    return module


@all_backends
def test_the_loop_in_process_and_a_rewind_to_before_its_second_turn(
    store_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's agent run in this process answers after three model turns; rewound to
    just before the second turn, the fork takes turn one from the log, asks the model
    for turns two and three again, and reuses the parent's refund (one request)."""
    mod = _example_module(monkeypatch, store_url, tmp_path)
    eng = mod.engine
    try:
        r = eng.run(mod.assistant, question="Please refund order o-17 now.")
        assert r.output == {"answer": ANSWERS["o-17"], "turns": 3}, r.error
        decided = [e.position for e in eng.events(r.run_id) if e.type == "llm_decided"]
        fork = eng.rewind(r.run_id, to=decided[1] - 1)
        assert fork.status == "completed", fork.error
        assert fork.output == r.output
    finally:
        eng.close()
    assert _payments(tmp_path) == ["refund:o-17"]
    calls = (tmp_path / "calls.log").read_text().splitlines()
    assert calls == [*FIRST, "turn 2", "turn 3", "turn 2", "turn 3"]
