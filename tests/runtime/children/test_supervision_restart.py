"""Supervision carried out on real runs (SQLite files and PostgreSQL), each restart and
escalation recorded with its reason: one_for_one resumes the failed child from its log
(it re-attempts the failed call, one resume marker), one_for_all compensates every
sibling whose result the parent has not taken (a running one is stopped first) and
starts them all again, rest_for_one only the failed child and those spawned after it,
and past the restart intensity the failure escalates up a three-level tree. A parent
that crashes in the middle of a restart finishes it on resume, restarting nothing twice.

The children are spawned and waited for with the helpers of test_supervision_kit (the
runtime's own open_child and record); test_supervision_api does the same through
run.spawn / child.result()."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from agents.kit import Crash, wait_until
from conftest import backends
from test_supervision_kit import Books, Counter, booking, events_of, fetcher, spawn, wait

from engine import Engine, Supervisor
from engine.kinds import RunStatus
from engine.runtime.children import supervisor

STORES = backends("sqlite", "postgres")


def _workers(eng: Engine, books: Books, counter: Counter) -> dict[str, Any]:
    book = booking(eng, books)

    @eng.agent
    def steady(run: Any, name: str) -> str:
        book(f"{name}#{counter.bump(name)}")
        return name

    @eng.agent
    def flaky(run: Any, name: str, after: str = "") -> str:
        """Fails its first attempt, once the run ``after`` names has booked (if given)."""
        n = counter.bump(name)
        book(f"{name}#{n}")
        if after:
            wait_until(lambda: books.done(f"{after}#1"), f"{after} booked", 60)
        if n == 1:
            raise RuntimeError(f"{name} broke")
        return name

    @eng.agent
    def busy(run: Any, name: str) -> str:
        """Its first run works on until it is stopped."""
        n = counter.bump(name)
        book(f"{name}#{n}")
        for _ in range(5000 if n == 1 else 0):
            run.decide("tick", time.sleep, 0.01)
        return name

    return {"steady": steady, "flaky": flaky, "busy": busy}


@STORES
def test_one_for_one_resumes_the_failed_child_which_retries_its_failed_call(
    eng: Engine, tmp_path: Path
) -> None:
    counter = Counter(tmp_path)
    worker = fetcher(eng, counter)

    @eng.agent(supervise=Supervisor("one_for_one", max_restarts=3, within=60.0))
    def boss(run: Any) -> int:
        call, child = spawn(run, worker, n=5)
        out: int = wait(run, call, child)
        return out

    result = eng.run(boss)
    assert (result.status, result.output) == (RunStatus.COMPLETED, 11)
    assert counter.get("fetch") == 2
    [spawned] = events_of(eng, result.run_id, "child_spawned")
    child = spawned["child_run_id"]
    [restarted] = events_of(eng, result.run_id, "child_restarted")
    assert restarted["child_run_id"] == restarted["previous_run_id"] == child
    assert restarted["strategy"] == "one_for_one" and restarted["restarts"] == 1
    assert "503" in restarted["reason"]
    kinds = [e.type for e in eng.events(child)]
    assert kinds.count("agent_failed") == 1 and kinds.count("agent_resumed") == 1
    assert kinds[-1] == "agent_finished" and eng.state(child).status == RunStatus.COMPLETED
    ends = [e["status"] for e in events_of(eng, result.run_id, "child_finished")]
    assert ends == ["failed", "completed"]
    eng.verify(result.run_id)  # a replay reaches the same: nothing restarts again


# strategy, the third child's agent, what is undone (in order), the calls restarted (in
# record order), how each first child ended up. one_for_all stops c (busy) first; the
# completed siblings the parent had not taken the result of are compensated and
# restarted too; rest_for_one leaves a, spawned before the failed b, alone.
GROUPS = [
    (
        "one_for_all",
        "busy",
        ["c#1", "b#1", "a#1"],
        [1, 3, 2],
        ["completed", "abandoned", "abandoned"],
    ),
    ("rest_for_one", "steady", ["c#1", "b#1"], [3, 2], ["completed", "abandoned", "completed"]),
]


@STORES
@pytest.mark.parametrize(("strategy", "third", "undone", "calls", "old"), GROUPS)
def test_a_group_strategy_compensates_the_siblings_and_starts_them_again(
    eng: Engine,
    tmp_path: Path,
    strategy: str,
    third: str,
    undone: list[str],
    calls: list[int],
    old: list[str],
) -> None:
    books, counter = Books(), Counter(tmp_path)
    w = _workers(eng, books, counter)

    @eng.agent(supervise=Supervisor(strategy, max_restarts=2, within=60.0))  # type: ignore[arg-type]
    def team(run: Any) -> list[str]:
        a = spawn(run, w["steady"], name="a")
        b = spawn(run, w["flaky"], name="b", after="c")
        c = spawn(run, w[third], name="c")
        return [wait(run, *b), wait(run, *a), wait(run, *c)]

    result = eng.run(team)
    assert (result.status, result.output) == (RunStatus.COMPLETED, ["b", "a", "c"]), result.error
    assert books.undone() == undone  # latest spawned first
    redone = sorted(w for k, w in books.log if k == "do")
    assert redone == sorted({"a#1", "b#1", "c#1"} | {f"{u[0]}#2" for u in undone})
    spawned = {e["call"]: e["child_run_id"] for e in events_of(eng, result.run_id, "child_spawned")}
    restarts = events_of(eng, result.run_id, "child_restarted")
    assert [r["call"] for r in restarts] == calls  # spawn order, the failed one last
    assert {r["strategy"] for r in restarts} == {strategy}
    assert len({r["at"] for r in restarts}) == 1 and {r["restarts"] for r in restarts} == {1}
    assert all(r["previous_run_id"] == spawned[r["call"]] != r["child_run_id"] for r in restarts)
    assert "sibling" in restarts[0]["reason"] and "b broke" in restarts[-1]["reason"]
    assert [eng.state(spawned[call]).status for call in (1, 2, 3)] == old
    assert all(eng.state(r["child_run_id"]).status == "completed" for r in restarts)


@STORES
def test_past_the_intensity_the_failure_escalates_up_three_levels(
    eng: Engine, tmp_path: Path
) -> None:
    counter = Counter(tmp_path)

    @eng.agent
    def worker(run: Any) -> None:
        counter.bump("worker")
        raise RuntimeError("disk full")

    @eng.agent(supervise=Supervisor("one_for_one", max_restarts=1, within=60.0))
    def lead(run: Any) -> None:
        wait(run, *spawn(run, worker))

    @eng.agent(supervise=Supervisor("one_for_one", max_restarts=1, within=60.0))
    def top(run: Any) -> None:
        wait(run, *spawn(run, lead))

    result = eng.run(top)
    assert result.status == RunStatus.FAILED and "disk full" in (result.error or "")
    assert "gave up" in (result.error or "")
    [lead_id] = [e["child_run_id"] for e in events_of(eng, result.run_id, "child_spawned")]
    [worker_id] = [e["child_run_id"] for e in events_of(eng, lead_id, "child_spawned")]
    assert counter.get("worker") == 2  # the first run and its one restart
    assert len(events_of(eng, lead_id, "child_restarted")) == 1
    [gave_up] = events_of(eng, lead_id, "supervisor_escalated")
    assert gave_up["child_run_id"] == worker_id and gave_up["restarts"] == 1
    assert "disk full" in gave_up["reason"]
    # The top restarted the lead once (it failed again at once: its supervisor had given
    # up, recorded), then gave up in turn.
    [again] = events_of(eng, result.run_id, "child_restarted")
    assert again["child_run_id"] == lead_id
    [top_gave_up] = events_of(eng, result.run_id, "supervisor_escalated")
    assert top_gave_up["child_run_id"] == lead_id
    assert len(events_of(eng, lead_id, "supervisor_escalated")) == 1  # not recorded twice
    assert eng.state(lead_id).status == eng.state(worker_id).status == RunStatus.FAILED


@STORES
def test_a_restart_interrupted_by_a_crash_is_finished_on_resume_never_twice(
    eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    books, counter = Books(), Counter(tmp_path)
    w = _workers(eng, books, counter)
    real = supervisor._start_new
    started: list[str] = []

    def crash_on_second(ctx: Any, record: Any) -> None:
        if len(started) == 1:
            started.append("crash")
            raise Crash()
        started.append(record.child_run_id)
        real(ctx, record)

    monkeypatch.setattr(supervisor, "_start_new", crash_on_second)

    @eng.agent(supervise=Supervisor("one_for_all", max_restarts=1, within=60.0))
    def team(run: Any) -> list[str]:
        b = spawn(run, w["flaky"], name="b", after="a")
        a = spawn(run, w["steady"], name="a")
        return [wait(run, *b), wait(run, *a)]

    with pytest.raises(Crash):
        eng.run(team)
    [run_id] = [r.run_id for r in eng.runs() if r.parent_run_id is None]
    assert len(events_of(eng, run_id, "child_restarted")) == 1  # a's; b's not yet
    result = eng.resume(run_id)
    assert (result.status, result.output) == (RunStatus.COMPLETED, ["b", "a"])
    restarts = events_of(eng, run_id, "child_restarted")
    # a's restart first, the failed b's last: until b's is recorded, a replay of the
    # parent sees b's failure and comes back to finish the restart.
    assert [r["call"] for r in restarts] == [2, 1] and len({r["at"] for r in restarts}) == 1
    assert books.undone() == ["a#1", "b#1"]  # each undone once, latest spawned first
    assert counter.get("a") == 2 and counter.get("b") == 2
    eng.verify(run_id)


@STORES
def test_the_failure_of_a_run_a_restart_already_replaced_restarts_nothing(
    eng: Engine, tmp_path: Path
) -> None:
    """A wait that still held a replaced sibling's old run id (it was abandoned by the
    restart) hands its end to the supervisor: it answers with the run that does the
    work now, and records nothing."""
    books, counter = Books(), Counter(tmp_path)
    w = _workers(eng, books, counter)

    @eng.agent(supervise=Supervisor("one_for_all", max_restarts=5, within=60.0))
    def team(run: Any) -> str:
        a = spawn(run, w["steady"], name="a")
        b = spawn(run, w["flaky"], name="b", after="a")
        wait(run, *b)
        return supervisor.restart(run, a[0], a[1], "its abandon, seen late")

    result = eng.run(team)
    restarts = events_of(eng, result.run_id, "child_restarted")
    assert len(restarts) == 2 and result.output == restarts[0]["child_run_id"]


@STORES
def test_a_one_for_one_restart_commits_the_childs_resume_with_it(
    eng: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The parent dies right after recording the restart, before executing the child:
    the child is already running (its resume marker came in the same commit), so
    recover (or the parent's wait) takes it up; the resumed parent restarts nothing."""
    counter = Counter(tmp_path)
    worker = fetcher(eng, counter)
    real, starts = Engine.start, []

    def start(self: Engine, run_id: str) -> None:
        starts.append(run_id)
        if len(starts) == 2:  # the restart's (the first was the spawn's)
            raise Crash()
        real(self, run_id)

    monkeypatch.setattr(Engine, "start", start)

    @eng.agent(supervise=Supervisor("one_for_one", max_restarts=3, within=60.0))
    def boss(run: Any) -> int:
        out: int = wait(run, *spawn(run, worker, n=5))
        return out

    with pytest.raises(Crash):
        eng.run(boss)
    [parent] = [r.run_id for r in eng.runs() if r.parent_run_id is None]
    child = starts[0]
    assert eng.state(child).status == RunStatus.RUNNING  # recover's to take up
    assert eng.resume(child).status == RunStatus.COMPLETED
    result = eng.resume(parent)
    assert (result.status, result.output) == (RunStatus.COMPLETED, 11)
    assert len(events_of(eng, parent, "child_restarted")) == 1 and counter.get("fetch") == 2
