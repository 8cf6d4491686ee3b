"""Two concurrent answers to one paused run give one winner and one clear refusal
(``RunBusy`` while the winner runs it, "not waiting" once it finished), never another
error: threads of one engine, threads of two engines, and two ``agentlog answer``
processes, on SQLite and PostgreSQL."""

from __future__ import annotations

import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from agents.kit import wait_until as _until
from conftest import backends
from test_cli_kit import agentlog, clean_env, make_workdir, sqlite_url

from engine import Engine, RunBusy
from engine.errors import UsageError


def _asker(
    eng: Engine, entered: threading.Event, release: threading.Event, also: list[Engine]
) -> Any:
    """An agent of ``eng`` whose tool waits for ``release``; the engines ``also`` know it
    too (as another process that imported its module would)."""
    tool_name = f"work_{uuid.uuid4().hex[:8]}"

    @eng.tool(name=tool_name)
    def work(value: str) -> str:
        entered.set()
        release.wait(30)
        return value

    @eng.agent(name=f"checks:asker_{tool_name}")
    def asker(run: Any) -> str:
        return str(work(run.ask("which?")))

    for other in also:
        other.agent(asker.fn, name=asker.name)
    return asker


@backends("sqlite", "postgres")
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
    r = first.run(_asker(first, entered, release, also=[] if same_engine else [second]))
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


@backends("sqlite", "postgres")
def test_two_answers_racing_give_one_winner_and_one_clear_refusal(store_url: str) -> None:
    """Two engines answer at the same instant, several times over: exactly one answer is
    recorded; the other gets RunBusy or 'not waiting', never another error."""
    for _ in range(4):
        engines = [Engine.open(store_url), Engine.open(store_url)]
        entered, release = threading.Event(), threading.Event()
        release.set()  # no overlap forced: the race is the point
        r = engines[0].run(_asker(engines[0], entered, release, also=engines[1:]))
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
import os
from engine import Engine
from engine.polling import poll_until

engine = Engine.open()


@engine.tool
def work(value: str) -> str:
    open(os.environ["ENTERED"], "w").close()
    poll_until(lambda: os.path.exists(os.environ["RELEASE"]), None, first=0.01, most=0.01)
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
