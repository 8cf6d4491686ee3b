"""Many agents, through exactly the surface CONTRACT.md gives ("Many agents"), on every
store: child runs (spawn, call, gather, status, await), a child's question pausing its
parent and answered through it, abandoning a tree deepest first, supervision, locks with
fencing tokens, durable messages and timers, and ``parent_run_id`` on results and state.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from agents.kit import python
from conftest import all_backends, backends

from engine import ChildFailed, Engine, EngineConfig, Supervisor
from engine.polling import poll_until


def _types(eng: Engine, run_id: str) -> list[str]:
    return [e.type for e in eng.events(run_id)]


@all_backends
def test_spawn_call_gather_and_lineage(eng: Engine) -> None:
    """A parent spawns, calls and gathers children: each child is a run of its own whose
    result and state name the parent; the parent's output carries the children's."""
    count: Counter[str] = Counter()

    @eng.agent
    def research(run: Any, topic: str) -> str:
        count[topic] += 1
        return f"notes on {topic}"

    @eng.agent
    def lead(run: Any) -> dict[str, Any]:
        first = run.spawn(research, topic="a")
        ids = [first.run_id]
        assert first.result() == "notes on a"
        assert first.status() == "completed"
        called = run.call(research, topic="b")
        both = run.gather(run.spawn(research, topic="c"), run.spawn(research, topic="d"))
        return {"ids": ids, "called": called, "both": both}

    r = eng.run(lead)
    assert r.status == "completed", r.error
    assert r.output["called"] == "notes on b"
    assert r.output["both"] == ["notes on c", "notes on d"]
    assert count == {"a": 1, "b": 1, "c": 1, "d": 1}
    child = r.output["ids"][0]
    assert eng.state(child).parent_run_id == r.run_id
    assert eng.resume(child).parent_run_id == r.run_id
    assert r.parent_run_id is None
    assert "child_spawned" in _types(eng, r.run_id)
    assert "child_finished" in _types(eng, r.run_id)
    # Resuming the finished parent starts nothing again.
    eng.resume(r.run_id)
    assert count == {"a": 1, "b": 1, "c": 1, "d": 1}


@all_backends
def test_async_parent_awaits_children(eng: Engine) -> None:
    """An async agent awaits a child handle and gathers several with asyncio.gather."""

    @eng.agent
    async def square(run: Any, n: int) -> int:
        return n * n

    @eng.agent
    async def fan(run: Any) -> list[int]:
        one = await run.spawn(square, n=2)
        rest = await asyncio.gather(run.spawn(square, n=3), run.spawn(square, n=4))
        return [one, *rest]

    r = eng.run(fan)
    assert (r.status, r.output) == ("completed", [4, 9, 16]), r.error


@all_backends
def test_a_failed_child_raises_child_failed_in_its_parent(eng: Engine) -> None:
    """A child that fails raises ChildFailed in its parent, naming the child run."""

    @eng.agent
    def broken(run: Any) -> None:
        raise ValueError("no data")

    @eng.agent
    def careful(run: Any) -> str:
        child = run.spawn(broken)
        try:
            child.result()
        except ChildFailed as e:
            assert e.run_id == child.run_id
            return "handled: " + str(e)
        return "not raised"

    r = eng.run(careful)
    assert r.status == "completed", r.error
    assert r.output.startswith("handled: ") and "no data" in r.output


@all_backends
def test_a_child_question_pauses_the_parent_and_answer_parent_reaches_it(eng: Engine) -> None:
    """A child that asks pauses its parent, whose `waiting` names the child and the
    question; answering the parent reaches the child, and the tree completes."""

    @eng.agent
    def approver(run: Any, item: str) -> str:
        return f"{item}: {run.ask('ship ' + item + '?')}"

    @eng.agent
    def shop(run: Any) -> str:
        return str(run.call(approver, item="lamp"))

    r = eng.run(shop)
    assert r.status == "paused"
    assert r.waiting is not None and "ship lamp?" in r.waiting
    kids = [k for k in eng.runs() if k.parent_run_id == r.run_id]
    assert len(kids) == 1 and kids[0].run_id in r.waiting
    assert eng.state(kids[0].run_id).status == "paused"

    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", "lamp: yes"), done.error
    assert eng.state(kids[0].run_id).status == "completed"


@all_backends
def test_abandon_parent_abandons_children_first_compensating_each(eng: Engine) -> None:
    """Abandoning a paused parent abandons its unfinished child first (its compensation
    runs before the parent's), then the parent."""
    undone: list[str] = []

    @eng.tool(side_effect=True, compensate=lambda result: undone.append(result))
    def reserve(what: str) -> str:
        return what

    @eng.agent
    def worker(run: Any) -> str:
        reserve("child-seat")
        return str(run.ask("go on?"))

    @eng.agent
    def boss(run: Any) -> str:
        reserve("parent-seat")
        return str(run.call(worker))

    r = eng.run(boss)
    assert r.status == "paused"
    out = eng.abandon(r.run_id)
    assert out.status == "abandoned", out.error
    assert undone == ["child-seat", "parent-seat"]
    kid = next(k for k in eng.runs() if k.parent_run_id == r.run_id)
    assert eng.state(kid.run_id).status == "abandoned"


@all_backends
def test_one_for_one_restarts_a_failing_child(eng: Engine) -> None:
    """A supervised parent restarts a child that fails; the restart is in the timeline."""
    attempts: Counter[str] = Counter()

    @eng.agent
    def flaky(run: Any) -> str:
        attempts["flaky"] += 1
        if attempts["flaky"] == 1:
            raise RuntimeError("first try fails")
        return "ok"

    @eng.agent(supervise=Supervisor(strategy="one_for_one", max_restarts=3, within=60.0))
    def team(run: Any) -> str:
        return str(run.call(flaky))

    r = eng.run(team)
    assert (r.status, r.output) == ("completed", "ok"), r.error
    assert attempts["flaky"] == 2
    assert "child_restarted" in _types(eng, r.run_id)


@all_backends
def test_past_max_restarts_the_failure_escalates(eng: Engine) -> None:
    """More restarts than allowed: the supervisor gives up and its run fails."""

    @eng.agent
    def hopeless(run: Any) -> None:
        raise RuntimeError("always")

    @eng.agent(supervise=Supervisor(strategy="one_for_one", max_restarts=1, within=60.0))
    def team(run: Any) -> str:
        return str(run.call(hopeless))

    r = eng.run(team)
    assert r.status == "failed"
    assert "supervisor_escalated" in _types(eng, r.run_id)


@all_backends
def test_lock_fences_increase_per_name(eng: Engine) -> None:
    """run.lock yields an int fencing token, strictly increasing per name; a replay
    returns the recorded one."""
    seen: list[int] = []

    @eng.agent
    def holder(run: Any) -> int:
        with run.lock("customer:42", ttl=30) as fence:
            seen.append(fence)
            return int(fence)

    first = eng.run(holder)
    second = eng.run(holder)
    assert first.status == second.status == "completed"
    assert isinstance(first.output, int) and second.output > first.output
    assert "lock_acquired" in _types(eng, first.run_id)
    assert "lock_released" in _types(eng, first.run_id)
    assert eng.resume(first.run_id).output == first.output


@pytest.fixture
def quick(store_url: str) -> Any:
    """An engine whose durable waits hold their thread at most 0.2 s."""
    e = Engine(store_url, config=EngineConfig(inline_wait=0.2))  # type: ignore[call-arg]
    yield e
    e.close()


@all_backends
def test_messages_are_delivered_once_and_recv_waits_durably(quick: Engine) -> None:
    """A receiver waiting longer than it may hold a thread is `waiting`; a message sent to
    it makes recover continue it with the value, consumed once."""

    @quick.agent
    def listener(run: Any) -> Any:
        return run.recv("offer", timeout=3600)

    @quick.agent
    def talker(run: Any, to: str) -> str:
        run.send(to, "offer", {"price": 10})
        return "sent"

    r = quick.run(listener)
    assert r.status == "waiting"
    assert quick.run(talker, to=r.run_id).status == "completed"

    def recovered() -> bool:
        quick.recover()
        return quick.state(r.run_id).status == "completed"

    poll_until(recovered, 30, first=0.05, most=0.05)
    assert quick.state(r.run_id).output == {"price": 10}
    received = [e for e in quick.events(r.run_id) if e.type == "message_received"]
    assert len(received) == 1


@all_backends
def test_recv_times_out_with_none(quick: Engine) -> None:
    @quick.agent
    def patient(run: Any) -> Any:
        return run.recv("never", timeout=0.05)

    r = quick.run(patient)
    assert (r.status, r.output) == ("completed", None), r.error


@all_backends
def test_a_long_sleep_waits_without_a_thread_and_recover_wakes_it_when_due(quick: Engine) -> None:
    """A sleep longer than the engine holds a thread leaves the run `waiting`; recover
    before the wake-up time writes nothing; after it, the run completes."""

    @quick.agent
    def napper(run: Any) -> str:
        run.sleep(1.0)
        return "rested"

    r = quick.run(napper)
    assert r.status == "waiting"
    before = len(quick.events(r.run_id))
    quick.recover()
    if quick.state(r.run_id).status == "waiting":  # not due yet: nothing written
        assert len(quick.events(r.run_id)) == before
    wake = quick.state(r.run_id).wake_at
    assert wake is not None
    poll_until(lambda: time.time() >= wake + 0.05, 30, first=0.05, most=0.05)  # due
    quick.recover()
    assert quick.state(r.run_id).status == "completed"
    assert quick.state(r.run_id).output == "rested"


@all_backends
def test_abandoning_a_parent_frees_the_locks_its_paused_child_holds(eng: Engine) -> None:
    """A child paused inside a lock block keeps the lock (a pause does not release it);
    abandoning its parent abandons the child and frees the lock for others at once."""

    @eng.agent
    def keeper(run: Any) -> str:
        with run.lock("shelf:1", ttl=60):
            return str(run.ask("hold on?"))

    @eng.agent
    def owner(run: Any) -> str:
        return str(run.call(keeper))

    r = eng.run(owner)
    assert r.status == "paused"
    assert [row.name for row in eng.store.locks.held()] == ["shelf:1"]
    assert eng.abandon(r.run_id).status == "abandoned"
    assert eng.store.locks.held() == []


@all_backends
def test_abandoning_a_fork_leaves_the_children_it_inherited_to_its_parent(eng: Engine) -> None:
    """A fork rewound after a spawn shares that child with its parent: abandoning the
    fork does not abandon (nor compensate) the child its parent still waits on."""

    @eng.agent
    def kid(run: Any) -> str:
        return str(run.ask("ok?"))

    @eng.agent
    def boss(run: Any) -> str:
        child = run.spawn(kid)
        run.checkpoint("spawned")
        return str(child.result())

    r = eng.run(boss)
    assert r.status == "paused"
    kid_id = next(k.run_id for k in eng.runs() if k.parent_run_id == r.run_id)
    fork = eng.rewind(r.run_id, to="spawned")
    assert eng.abandon(fork.run_id).status == "abandoned"
    assert eng.state(kid_id).status == "paused"
    assert eng.answer(r.run_id, "yes").output == "yes"


TEAM = """
import time
from pathlib import Path
from engine import Engine

engine = Engine.open()
marks = Path(__file__).with_name("effects.txt")


@engine.tool(side_effect=True)
def charge(order: str) -> str:
    with marks.open("a") as f:
        f.write(order + "\\n")
    return order


@engine.agent
def asker(run):
    return run.ask("ship it?")


@engine.agent
def payer(run):
    time.sleep(1.0)  # still at work when its sibling's question pauses the parent
    return charge("o-1")


@engine.agent
def team(run):
    return run.gather(run.spawn(asker), run.spawn(payer))
"""


@backends("sqlite", "postgres")
def test_a_cli_run_that_pauses_lets_running_children_finish_before_exiting(
    store_url: str, tmp_path: Path
) -> None:
    """`agentlog run` returns when its parent pauses on a child's question; a sibling
    still at work finishes its side effect before the process exits (no half-done
    effect left for a person to settle)."""
    (tmp_path / "team.py").write_text(TEAM)
    p = python("-m", "replay.cli", "run", "team:team", "--url", store_url, cwd=tmp_path)
    assert p.returncode == 3, p.stderr
    assert (tmp_path / "effects.txt").read_text() == "o-1\n"
    eng = Engine(store_url)
    payer = next(r for r in eng.runs() if r.agent.endswith(":payer"))
    assert eng.state(payer.run_id).status == "completed"
    eng.close()


@all_backends
def test_abandon_of_a_forged_loop_of_parents_is_one_clear_error(eng: Engine) -> None:
    """Rows forged so that two runs are each other's child: abandon says the tree loops
    (CorruptData), never recursing until Python gives up."""
    from engine import CorruptData
    from engine import events as ev
    from engine.log.history import RunWriter
    from engine.log.state import RunState

    for me, other in (("loop-a", "loop-b"), ("loop-b", "loop-a")):
        writer = RunWriter(eng.store, RunState(run_id=me))
        writer.append(ev.AgentStarted(at=1.0, agent="m:a", import_path="m", parent_run_id=other))
        writer.append(ev.ChildSpawned(at=2.0, call=1, child_run_id=other, agent="m:a"))
    with pytest.raises(CorruptData, match="loops"):
        eng.abandon("loop-a")
