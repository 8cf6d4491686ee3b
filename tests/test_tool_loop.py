"""examples/tool_loop.py, an OpenAI-style tool-calling loop, run as the script it is (a
real subprocess) on a SQLite file and on PostgreSQL, SIGKILLed mid-loop and finished by
a resume in a new process: the refund reaches the outside payments service once, the
scripted model is not asked again for a turn the log already holds, and the answer is
right."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import closing
from pathlib import Path

from conftest import backends

from engine import Engine

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "examples" / "tool_loop.py"
HANG = 300  # seconds: only so that a broken example cannot hang the suite
ANSWERS = {
    "o-17": "Refunded 12.50 for order o-17; your store credit is now 37.50.",
    "o-18": "Refunded 9.90 for order o-18; your store credit is now 34.90.",
}


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
    deadline = time.monotonic() + HANG
    while not (gate / "reached").exists() and proc.poll() is None:
        assert time.monotonic() < deadline, f"the example never reached its gate {at!r}"
        time.sleep(0.02)
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
    """The run completed with the right answer after three recorded model turns, and
    the refund's outcome is recorded once."""
    with closing(Engine.open(url)) as engine:
        state = engine.state(run_id)
        assert state.status == "completed", (state.status, state.error)
        assert state.output == {"answer": ANSWERS[order], "turns": 3}
        events = engine.events(run_id)
        assert [e.data["name"] for e in events if e.type == "llm_decided"] == ["model"] * 3
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
    assert _calls(env) == ["turn 1", "turn 2"]
    with closing(Engine.open(store_url)) as engine:
        assert engine.state(run_id).status == "running"  # its process died mid-loop
    p = _run(env, "-m", "replay", "resume", run_id)
    assert p.returncode == 0, p.stdout + p.stderr
    assert _payments(tmp_path) == ["refund:o-17"]  # verified, not sent again
    assert _calls(env) == ["turn 1", "turn 2", "turn 3"]
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
    assert _calls(env) == ["turn 1", "turn 2", "turn 3"]
    p = _run(env, str(SCRIPT), run_id, order)
    assert p.returncode == 0, p.stdout + p.stderr
    assert ANSWERS[order] in p.stdout
    assert _payments(tmp_path) == ["refund:o-18"]
    assert _calls(env) == ["turn 1", "turn 2", "turn 3", "turn 3"]
    _check_finished(store_url, run_id, order)
