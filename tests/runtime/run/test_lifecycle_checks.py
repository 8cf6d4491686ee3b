"""The edges of a run's life that must not damage or hide its log: a sync tool's result
that arrives after its run ended is kept in the tool's own stream (never appended after
``agent_finished``); ``recover`` goes on past a run it cannot resume and reports it; a
zombie owner is dead."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents.kit import wait_until as _until
from conftest import all_backends
from structlog.testing import capture_logs
from test_cli_kit import make_workdir, sqlite_url

from engine import Engine, RetryPolicy
from engine import events as ev
from engine import observe as engine_log
from engine.log.history import RunWriter, run_stream
from engine.log.state import RunState
from engine.runtime.host.leases import HOST, alive, pid_space
from engine.runtime.run.context import RunContext
from engine.store import Append, stream_id

# --- a late result after the run ended ----------------------------------------------------


def _impatient(eng: Engine, release: threading.Event, *, ask: bool = False) -> tuple[str, Any]:
    """An agent whose sync tool is abandoned at its 0.2 s timeout (it returns "late" once
    ``release`` is set); the agent goes on without it and finishes, or (``ask``) pauses on
    a question. Returns the tool's name and the agent."""
    tool_name = f"slow_{uuid.uuid4().hex[:8]}"

    @eng.tool(name=tool_name, timeout=0.2, retry=RetryPolicy(max_attempts=1))
    def slow() -> str:
        release.wait(30)
        return "late"

    @eng.agent(name=f"checks:impatient_{tool_name}")
    def impatient(run: Any) -> str:
        with contextlib.suppress(Exception):
            slow()
        return str(run.ask("go on?")) if ask else "gave up"

    return tool_name, impatient


@all_backends
def test_a_late_result_after_the_run_finished_goes_to_the_tool_stream(eng: Engine) -> None:
    """The tool times out (0.2 s), the agent goes on and finishes; the abandoned thread's
    result then lands in the tool's own stream naming the run and call, and the run's log
    still ends with agent_finished (and reads without CorruptData)."""
    release = threading.Event()
    tool_name, impatient = _impatient(eng, release)
    r = eng.run(impatient)
    assert (r.status, r.output) == ("completed", "gave up")
    release.set()
    tool_stream = stream_id("tool:" + tool_name)
    kept = _until(lambda: eng.store.read(tool_stream), "the late result")
    assert [type(k.event) for k in kept] == [ev.ToolLateResult]
    late = kept[0].event
    assert isinstance(late, ev.ToolLateResult)
    assert (late.run_id, late.call, late.tool, late.result) == (r.run_id, 1, tool_name, "late")
    types = [e.type for e in eng.events(r.run_id)]
    assert types[-1] == "agent_finished" and "tool_late_result" not in types
    assert eng.state(r.run_id).status == "completed"


@all_backends
def test_a_late_result_racing_the_finish_never_follows_it(
    eng: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The late result arrives after agent_finished is committed but before this execution
    is marked over (pinned there by holding ``end`` until the result was handled): it is
    kept in the tool stream, because the check and the append share the run's lock."""
    release = threading.Event()
    tool_name, impatient = _impatient(eng, release)
    tool_stream = stream_id("tool:" + tool_name)
    end = RunContext.end

    def end_after_the_late_result(ctx: RunContext) -> None:
        release.set()
        raw = lambda: [type(r.event) for r in eng.store.read(run_stream(ctx.run_id))]  # noqa: E731
        _until(lambda: eng.store.read(tool_stream) or ev.ToolLateResult in raw(), "the result")
        end(ctx)

    monkeypatch.setattr(RunContext, "end", end_after_the_late_result)
    r = eng.run(impatient)
    assert r.status == "completed"
    stored = [type(rec.event) for rec in eng.store.read(run_stream(r.run_id))]
    assert stored[-1] is ev.AgentFinished and ev.ToolLateResult not in stored
    assert [type(k.event) for k in eng.store.read(tool_stream)] == [ev.ToolLateResult]


@all_backends
def test_a_late_result_while_the_run_is_paused_stays_out_of_its_log(eng: Engine) -> None:
    """A run paused for a person no longer belongs to this execution: the late result goes
    to the tool stream, and the answer continues the run without a conflict."""
    release = threading.Event()
    tool_name, asks = _impatient(eng, release, ask=True)
    r = eng.run(asks)
    assert r.status == "paused"
    release.set()
    _until(lambda: eng.store.read(stream_id("tool:" + tool_name)), "the late result")
    assert eng.answer(r.run_id, "yes").output == "yes"
    assert "tool_late_result" not in [e.type for e in eng.events(r.run_id)]


def test_a_late_result_after_the_engine_closed_is_dropped(tmp_path: Path) -> None:
    """The engine (and its SQLite connections) closed before the abandoned thread returned:
    the late result is dropped with a log line without touching the closed store (which
    can crash the interpreter), and the store reopens intact."""
    url = sqlite_url(tmp_path)
    eng = Engine.open(url)
    release = threading.Event()
    tool_name, impatient = _impatient(eng, release)
    engine_log.get()  # a first use may configure structlog, which would undo capture_logs
    with capture_logs() as logs:  # before the run: its logger is bound when it starts
        r = eng.run(impatient)
        eng.close()
        release.set()
        _until(lambda: [e for e in logs if e["event"].startswith("late_result")], "the result")
    assert [e["event"] for e in logs if e["event"].startswith("late_")] == ["late_result_dropped"]
    again = Engine.open(url)
    assert again.store.read(stream_id("tool:" + tool_name)) == []
    assert again.state(r.run_id).status == "completed"
    again.close()


# --- recover goes on past runs it cannot resume ---------------------------------------------


def _crashed(eng: Engine, agent: str, import_path: str, **input: Any) -> str:
    """A run whose process died right after it started (status running, no lease)."""
    rid = uuid.uuid4().hex
    w = RunWriter(eng.store, RunState(run_id=rid))
    w.append(ev.AgentStarted(at=ev.now(), agent=agent, import_path=import_path, input=input))
    return rid


@all_backends
def test_recover_reports_runs_it_cannot_resume_and_resumes_the_rest(eng: Engine) -> None:
    """A damaged run and a run whose agent no longer imports are reported (status kept,
    error naming why, not_resumed='refused'); the healthy run beside them completes."""

    @eng.agent(name="checks:healthy")
    def healthy(run: Any) -> str:
        return str(run.decide("d", lambda: "done"))

    ok = _crashed(eng, "checks:healthy", healthy.import_path)
    damaged = _crashed(eng, "checks:healthy", healthy.import_path)
    eng.store.append(_at(damaged, 3, ev.AgentResumed(at=ev.now())))  # position 2 is missing
    gone = _crashed(eng, "no_such_module_xyz:agent", "no_such_module_xyz")
    results = {r.run_id: r for r in eng.recover()}
    assert set(results) == {ok, damaged, gone}
    assert (results[ok].status, results[ok].output, results[ok].not_resumed) == (
        "completed",
        "done",
        None,
    )
    bad, lost = results[damaged], results[gone]
    assert (bad.status, bad.not_resumed) == ("running", "refused")
    assert bad.error is not None and f"run {damaged}" in bad.error and "position 2" in bad.error
    assert (lost.status, lost.not_resumed) == ("running", "refused")
    assert lost.error is not None and "cannot import agent" in lost.error


def _at(run_id: str, position: int, event: ev.Event) -> list[Any]:
    return [Append(run_stream(run_id), position, event)]


BOOM = "raise RuntimeError('this module is broken')\n"


def test_cli_recover_prints_every_outcome_and_exits_with_the_worst(tmp_path: Path) -> None:
    """``agentlog recover`` resumes what it can and prints every run; its status is the
    worst: 2 when a run could not be resumed, 1 once an unexpected error is among them;
    --json carries not_resumed."""
    url = sqlite_url(tmp_path)
    work = make_workdir(tmp_path, url)
    (tmp_path / "boom_agents.py").write_text(BOOM)
    e = Engine.open(url)
    ok = _crashed(e, "agents:hello", "agents", name="x")
    gone = _crashed(e, "gone_module_xyz:agent", "gone_module_xyz")
    e.close()
    r = work.cli("recover")
    assert r.code == 2, r
    assert ok in r.out and gone in r.out and "cannot import agent" in r.out, r.out
    assert "Traceback" not in r.err
    e = Engine.open(url)
    assert e.state(ok).status == "completed"
    boom = _crashed(e, "boom_agents:agent", "boom_agents")
    e.close()
    r = work.cli("recover", "--json")
    assert r.code == 1, r
    docs = {d["run_id"]: d for d in r.json()}
    assert docs[boom]["not_resumed"] == "unexpected" and "broken" in docs[boom]["error"]
    assert docs[gone]["not_resumed"] == "refused"
    assert ok not in docs  # it completed: nothing left to recover


# --- zombies --------------------------------------------------------------------------------


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_an_exited_but_unreaped_owner_is_dead() -> None:
    """A child that has exited and was not waited for still answers signal 0 (a zombie);
    its lease owner is dead all the same. A live child's owner is alive."""
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=-1)
    try:
        owner = f"{HOST}:{child.pid}:0123abcd:{pid_space()}"
        assert alive(owner)
        assert child.stdin is not None
        child.stdin.close()  # it exits now; nobody reaps it until wait() below
        _until(lambda: _state(child.pid) == "Z", "the child to become a zombie")
        os.kill(child.pid, 0)  # a zombie still receives signal 0
        assert not alive(owner)
    finally:
        child.wait()


def _state(pid: int) -> str:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat[stat.rfind(")") + 1 :].split()[0]


@pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc")
def test_resume_takes_over_a_run_whose_owner_is_a_zombie(tmp_path: Path) -> None:
    """A run leased by a process that exited unreaped is resumed, not refused as busy."""
    e = Engine.open(sqlite_url(tmp_path))

    @e.agent(name="checks:zombie_owned")
    def owned(run: Any) -> int:
        return 7

    rid = _crashed(e, "checks:zombie_owned", owned.import_path)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        _until(lambda: _state(child.pid) == "Z", "the child to become a zombie")
        now = time.time()
        e.store.take_lease(rid, f"{HOST}:{child.pid}:0123abcd:{pid_space()}", now + 300, now)
        assert e.resume(rid).output == 7
    finally:
        child.wait()
        e.close()
