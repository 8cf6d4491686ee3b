"""The edges of a run's life that must not damage or hide its log: a sync tool's result
that arrives after its run ended is kept in the tool's own stream (never appended after
``agent_finished``); ``recover`` goes on past a run it cannot resume and reports it; a
zombie owner is dead; two concurrent answers give one winner and one clear ``RunBusy``."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import all_backends
from test_cli_kit import agentlog, make_workdir, sqlite_url

from engine import Engine, RetryPolicy, RunBusy
from engine import events as ev
from engine.errors import UsageError
from engine.history import RunWriter, run_stream
from engine.runtime.context import RunContext
from engine.runtime.leases import HOST, alive
from engine.state import RunState
from engine.store import Append, stream_id


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine.open(store_url)
    yield e
    e.close()


def _until(found: Callable[[], Any], what: str, wait: float = 20.0) -> Any:
    """Poll ``found`` until it is truthy (a bounded wait for another thread or process)."""
    deadline = time.monotonic() + wait
    while not (value := found()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.01)
    return value


# --- a late result after the run ended ----------------------------------------------------


def _slow_tool(eng: Engine, release: threading.Event) -> tuple[str, Any]:
    """A sync tool abandoned at its 0.2 s timeout that returns "late" once released."""
    tool_name = f"slow_{uuid.uuid4().hex[:8]}"

    @eng.tool(name=tool_name, timeout=0.2, retry=RetryPolicy(max_attempts=1))
    def slow() -> str:
        release.wait(30)
        return "late"

    return tool_name, slow


@all_backends
def test_a_late_result_after_the_run_finished_goes_to_the_tool_stream(eng: Engine) -> None:
    """The tool times out (0.2 s), the agent goes on and finishes; the abandoned thread's
    result then lands in the tool's own stream naming the run and call, and the run's log
    still ends with agent_finished (and reads without CorruptData)."""
    release = threading.Event()
    tool_name, slow = _slow_tool(eng, release)

    @eng.agent
    def impatient(run: Any) -> str:
        try:
            return str(slow())
        except Exception:
            return "gave up"

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
    tool_name, slow = _slow_tool(eng, release)
    tool_stream = stream_id("tool:" + tool_name)
    end = RunContext.end

    def end_after_the_late_result(ctx: RunContext) -> None:
        release.set()
        raw = lambda: [type(r.event) for r in eng.store.read(run_stream(ctx.run_id))]  # noqa: E731
        _until(lambda: eng.store.read(tool_stream) or ev.ToolLateResult in raw(), "the result")
        end(ctx)

    monkeypatch.setattr(RunContext, "end", end_after_the_late_result)

    @eng.agent
    def impatient(run: Any) -> str:
        with contextlib.suppress(Exception):
            slow()
        return "gave up"

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
    tool_name, slow = _slow_tool(eng, release)

    @eng.agent
    def asks(run: Any) -> str:
        with contextlib.suppress(Exception):
            slow()
        return str(run.ask("go on?"))

    r = eng.run(asks)
    assert r.status == "paused"
    release.set()
    _until(lambda: eng.store.read(stream_id("tool:" + tool_name)), "the late result")
    assert eng.answer(r.run_id, "yes").output == "yes"
    assert "tool_late_result" not in [e.type for e in eng.events(r.run_id)]


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
        owner = f"{HOST}:{child.pid}:0123abcd"
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
        e.store.take_lease(rid, f"{HOST}:{child.pid}:0123abcd", now + 300, now)
        assert e.resume(rid).output == 7
    finally:
        child.wait()
        e.close()


# --- concurrent answers ------------------------------------------------------------------------


def _asker(eng: Engine, entered: threading.Event, release: threading.Event) -> Any:
    tool_name = f"work_{uuid.uuid4().hex[:8]}"

    @eng.tool(name=tool_name)
    def work(value: str) -> str:
        entered.set()
        release.wait(30)
        return value

    @eng.agent(name=f"checks:asker_{tool_name}")
    def asker(run: Any) -> str:
        return str(work(run.ask("which?")))

    return asker


@pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
@pytest.mark.parametrize("same_engine", [True, False])
def test_a_second_answer_while_the_first_runs_is_refused_as_busy(
    store_url: str, same_engine: bool
) -> None:
    """Two answers to one paused run, from two threads (of one engine, or of two engines
    as two processes would be): the first continues the run, the second gets RunBusy
    naming the owner; once the run finished, a late answer is 'not waiting'."""
    first = Engine.open(store_url)
    second = first if same_engine else Engine.open(store_url)
    entered, release = threading.Event(), threading.Event()
    r = first.run(_asker(first, entered, release))
    assert r.status == "paused"
    outcome: dict[str, Any] = {}
    t = threading.Thread(target=lambda: outcome.update(r=first.answer(r.run_id, "a")))
    t.start()
    try:
        assert entered.wait(30)
        with pytest.raises(RunBusy, match=f"run {r.run_id} is executing in"):
            second.answer(r.run_id, "b")
    finally:
        release.set()
        t.join(30)
    assert (outcome["r"].status, outcome["r"].output) == ("completed", "a")
    with pytest.raises(UsageError, match="not waiting for an answer"):
        second.answer(r.run_id, "b")
    answers = [e.data["value"] for e in first.events(r.run_id) if e.type == "human_input_provided"]
    assert answers == ["a"]
    first.close()
    second.close()


@pytest.mark.parametrize("store_url", ["sqlite", "postgres"], indirect=True)
def test_two_answers_racing_give_one_winner_and_one_clear_refusal(store_url: str) -> None:
    """Two engines answer at the same instant, several times over: exactly one answer is
    recorded; the other gets RunBusy or 'not waiting', never another error."""
    for _ in range(4):
        engines = [Engine.open(store_url), Engine.open(store_url)]
        entered, release = threading.Event(), threading.Event()
        release.set()  # no overlap forced: the race is the point
        r = engines[0].run(_asker(engines[0], entered, release))
        outcomes = _race_answers(engines, r.run_id)
        assert outcomes.count("completed") == 1, outcomes
        loser = next(o for o in outcomes if o != "completed")
        assert loser.startswith(("RunBusy: ", "UsageError: ")), outcomes
        assert "is executing in" in loser or "not waiting for an answer" in loser, outcomes
        provided = [e for e in engines[0].events(r.run_id) if e.type == "human_input_provided"]
        assert len(provided) == 1
        for e in engines:
            e.close()


def _race_answers(engines: list[Engine], run_id: str) -> list[str]:
    """Each engine answers ``run_id`` from its own thread, released at the same instant:
    the run's status, or the refusal's class and message."""
    barrier = threading.Barrier(len(engines))
    outcomes = ["" for _ in engines]

    def answer(i: int) -> None:
        barrier.wait()
        try:
            outcomes[i] = engines[i].answer(run_id, f"v{i}").status
        except UsageError as e:  # RunBusy is one
            outcomes[i] = f"{type(e).__name__}: {e}"

    threads = [threading.Thread(target=answer, args=(i,)) for i in range(len(engines))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return outcomes


ANSWER_AGENT = """
import os, time
from engine import Engine

engine = Engine.open()


@engine.tool
def work(value: str) -> str:
    open(os.environ["ENTERED"], "w").close()
    while not os.path.exists(os.environ["RELEASE"]):
        time.sleep(0.01)
    return value


@engine.agent
def asker(run):
    return work(run.ask("which?"))
"""


def test_two_agentlog_answer_processes_one_wins_one_exits_2(tmp_path: Path) -> None:
    """Two real ``agentlog answer`` processes: the one that gets the run continues it and
    exits 0; the other exits 2 with one clear line naming the busy run, no traceback."""
    url = sqlite_url(tmp_path)
    work = make_workdir(tmp_path, url)
    (tmp_path / "answer_agents.py").write_text(ANSWER_AGENT)
    env = {"ENTERED": str(tmp_path / "entered"), "RELEASE": str(tmp_path / "release")}
    run_id = work.cli("run", "answer_agents:asker", "--json", env=env).json()["run_id"]
    argv = [sys.executable, "-m", "replay.cli", "answer", run_id]
    from test_cli_kit import clean_env

    procs = [
        subprocess.Popen(
            [*argv, value, "--url", url],
            cwd=tmp_path,
            env=clean_env(env),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for value in ("a", "b")
    ]
    try:
        _until(lambda: (tmp_path / "entered").exists(), "an answer to reach the tool")
        loser = _until(lambda: next((p for p in procs if p.poll() is not None), None), "a loser")
        (tmp_path / "release").touch()
        winner = next(p for p in procs if p is not loser)
        assert winner.wait(60) == 0, winner.stderr.read() if winner.stderr else ""
    finally:
        (tmp_path / "release").touch()
        for p in procs:
            p.wait(60)
    assert loser.stderr is not None
    err = loser.stderr.read().decode()
    assert loser.returncode == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err, err
    assert f"run {run_id} is executing in" in lines[0], err
    r = agentlog("state", run_id, "--json", "--url", url, cwd=tmp_path)
    assert r.json()["status"] == "completed", r
