"""A child's question pauses its parent, on SQLite and PostgreSQL: the parent is
``paused`` with ``waiting`` naming the child and its question (``child_paused``),
holding no thread; ``answer PARENT`` reaches the child that asked (a grandchild too) and
the whole tree continues, returning the parent's result; ``answer CHILD`` works as
well and continues its ancestors. A child that waits on a timer or a message suspends
its parent (``run_waiting``) until it moves."""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest
from conftest import backends

from engine import Engine
from engine import events as ev
from engine.errors import Suspended, UsageError
from engine.log.waiting import Child
from engine.runtime.children import spawn as children
from engine.runtime.run.repository import result_of
from engine.runtime.waits import wakeups

TREE = backends("sqlite", "postgres")


def _data(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


def _child(eng: Engine, run_id: str, n: int = 0) -> str:
    return str(_data(eng, run_id, "child_spawned")[n]["child_run_id"])


def _switchable(eng: Engine) -> tuple[Any, dict[str, str]]:
    """A parent whose child asks "ok?", and the switch that changes its code: with
    ``code["agent"] = "other"`` it spawns another agent at that call (a divergence)."""
    code = {"agent": "asker"}

    @eng.agent
    def asker(run: Any) -> Any:
        return run.ask("ok?")

    @eng.agent
    def other(run: Any) -> Any:
        return "other"

    @eng.agent
    def boss(run: Any) -> Any:
        return run.call(asker if code["agent"] == "asker" else other)

    return boss, code


@TREE
def test_a_child_question_pauses_the_parent_and_answer_parent_reaches_it(eng: Engine) -> None:
    """The parent pauses naming the child and question; no lease is held; answering the
    PARENT records the answer in the child, which completes, and the parent continues
    from its wait (nothing before it runs again) to completion."""
    ran: Counter[str] = Counter()

    @eng.agent
    def approver(run: Any, item: str) -> str:
        ran["approver"] += 1
        return f"{item}:{run.ask(f'approve {item}?')}"

    @eng.agent
    def flow(run: Any) -> Any:
        ran["flow"] += 1
        verdict = run.call(approver, item="x")
        ran["after"] += 1
        return verdict

    r = eng.run(flow)
    kid = _child(eng, r.run_id)
    assert (r.status, r.waiting) == ("paused", f"child {kid} asks: approve x?")
    state = eng.state(r.run_id)
    assert (state.status, state.waits_on) == ("paused", Child(kid, kid, "approve x?"))
    assert _data(eng, r.run_id, "child_paused") == [
        {"call": 1, "child_run_id": kid, "asking_run_id": kid, "question": "approve x?"}
    ]
    assert eng.state(kid).status == "paused"
    assert eng.store.lease(r.run_id) is None and eng.store.lease(kid) is None
    before = [e.type for e in eng.events(r.run_id)]
    again = eng.resume(r.run_id)  # the child still asks: the parent stays, writing nothing
    assert (again.status, again.waiting) == ("paused", r.waiting)
    assert [e.type for e in eng.events(r.run_id)] == before

    done = eng.answer(r.run_id, "yes")
    assert (done.run_id, done.status, done.output) == (r.run_id, "completed", "x:yes")
    assert _data(eng, kid, "human_input_provided") == [
        {"call": 1, "value": "yes", "confirmed": False}
    ]
    assert eng.state(kid).status == "completed"
    assert ran["after"] == 1
    assert _data(eng, r.run_id, "human_input_provided") == []


@TREE
def test_answer_child_continues_its_parent(eng: Engine) -> None:
    """Answering the CHILD directly completes it, and its parent continues at once."""

    @eng.agent
    def asker(run: Any) -> Any:
        return run.ask("name?")

    @eng.agent
    def greeter(run: Any) -> Any:
        return "hello " + run.call(asker)

    r = eng.run(greeter)
    assert r.status == "paused"
    kid = _child(eng, r.run_id)
    child_result = eng.answer(kid, "ada")
    assert (child_result.status, child_result.parent_run_id) == ("completed", r.run_id)
    parent = eng.state(r.run_id)
    assert (parent.status, parent.output) == ("completed", "hello ada")


@TREE
def test_a_grandchild_question_reaches_the_top_and_answers_flow_down(eng: Engine) -> None:
    """A grandchild's question pauses its parent and grandparent, each naming the
    grandchild; two answers to the TOP reach it (a second question included), and the
    whole tree completes."""

    @eng.agent
    def leaf(run: Any) -> Any:
        return [run.ask("first?"), run.ask("second?")]

    @eng.agent
    def middle(run: Any) -> Any:
        return {"leaf": run.call(leaf)}

    @eng.agent
    def top(run: Any) -> Any:
        return {"middle": run.call(middle)}

    r = eng.run(top)
    mid = _child(eng, r.run_id)
    grand = _child(eng, mid)
    assert r.waiting == f"child {grand} asks: first?"
    assert eng.state(mid).waiting == f"child {grand} asks: first?"
    assert eng.state(mid).waits_on == Child(grand, grand, "first?")
    assert eng.state(r.run_id).waits_on == Child(mid, grand, "first?")

    second = eng.answer(r.run_id, 1)
    assert (second.status, second.waiting) == ("paused", f"child {grand} asks: second?")
    assert eng.state(mid).waiting == f"child {grand} asks: second?"
    done = eng.answer(r.run_id, 2)
    assert (done.status, done.output) == ("completed", {"middle": {"leaf": [1, 2]}})
    assert [eng.state(x).status for x in (mid, grand)] == ["completed", "completed"]


@TREE
def test_answer_parent_refuses_when_no_descendant_asks(eng: Engine) -> None:
    """A parent waiting on a child that no longer waits for a person (answered, but the
    parent could not continue: its code changed) refuses an answer with a UsageError
    naming the child, recording nothing; once its code is back, resume continues it."""
    boss, code = _switchable(eng)
    r = eng.run(boss)
    kid = _child(eng, r.run_id)
    code["agent"] = "other"
    assert eng.answer(kid, "yes").status == "completed"
    assert eng.state(r.run_id).status == "paused"  # its continuation diverged: logged
    before = [e.type for e in eng.events(r.run_id)]
    with pytest.raises(UsageError, match=f"child {kid}, which does not wait for an answer"):
        eng.answer(r.run_id, "again")
    assert [e.type for e in eng.events(r.run_id)] == before
    code["agent"] = "asker"
    done = eng.resume(r.run_id)
    assert (done.status, done.output) == ("completed", "yes")
    with pytest.raises(UsageError, match="not waiting for an answer"):
        eng.answer(r.run_id, "again")


@TREE
def test_a_waiting_child_suspends_its_parent_until_it_moves(eng: Engine) -> None:
    """A child that stops holding no thread (run_waiting, status waiting) makes its
    parent wait too (run_waiting reason child, waiting on Child(ID)); when the child is
    resumed and completes, the parent continues on its own."""
    woken = {"ready": False}

    @eng.agent
    def sleeper(run: Any) -> str:
        if not woken["ready"]:
            # Not due for an hour: nothing wakes it before the test resumes it.
            until = ev.now() + 3600
            run.record(ev.RunWaiting(at=ev.now(), call=1, reason="timer", until=until))
            raise Suspended("timer")
        return "rested"

    @eng.agent
    def boss(run: Any) -> Any:
        return run.call(sleeper)

    r = eng.run(boss)
    kid = _child(eng, r.run_id)
    assert eng.state(kid).status == "waiting"
    state = eng.state(r.run_id)
    assert (r.status, state.status, state.waits_on) == ("waiting", "waiting", Child(kid))
    assert r.waiting == f"child {kid}"
    assert _data(eng, r.run_id, "run_waiting") == [
        {"call": 1, "reason": "child", "until": None, "topic": None, "child_run_id": kid}
    ]
    before = [e.type for e in eng.events(r.run_id)]
    assert eng.resume(r.run_id).status == "waiting"  # the child still waits: nothing new
    assert [e.type for e in eng.events(r.run_id)] == before
    woken["ready"] = True
    eng.resume(kid)
    parent = eng.state(r.run_id)
    assert (parent.status, parent.output) == ("completed", "rested")


@TREE
def test_a_parent_stopped_on_a_child_that_moved_meanwhile_goes_on(eng: Engine) -> None:
    """A parent that paused on its child just as the child's answer came in (here: its
    continuation could not run then) is due for recover (wakeups.due), and the end of
    its own execution continues it (after_run reads its own state first)."""
    boss, code = _switchable(eng)
    r = eng.run(boss)
    state = eng.state(r.run_id)
    assert not wakeups.due(eng.store, state, time.time())  # its child still asks
    code["agent"] = "other"
    eng.answer(_child(eng, r.run_id), "yes")
    state = eng.state(r.run_id)
    assert state.status == "paused" and wakeups.due(eng.store, state, time.time())
    code["agent"] = "asker"
    children.after_run(eng, eng.store, result_of(state))
    assert (eng.state(r.run_id).status, eng.state(r.run_id).output) == ("completed", "yes")


@TREE
def test_an_async_parent_gathering_pauses_on_one_child_and_goes_on(eng: Engine) -> None:
    """An async parent awaiting two children at once pauses on the one that asks; the
    other's wait stops with the run (writing nothing after it). Answering the parent
    completes the tree, each child run once."""
    ran: Counter[str] = Counter()

    @eng.agent
    def asks(run: Any) -> Any:
        ran["asks"] += 1
        return run.ask("go?")

    @eng.agent
    def works(run: Any) -> Any:
        ran["works"] += 1
        return "worked"

    @eng.agent
    async def lead(run: Any) -> Any:
        return await run.gather(run.spawn(asks), run.spawn(works))

    r = eng.run(lead)
    assert r.status == "paused" and (r.waiting or "").endswith("asks: go?")
    done = eng.answer(r.run_id, "go")
    assert (done.status, done.output) == ("completed", ["go", "worked"])
    assert ran == {"asks": 3, "works": 1}  # asks: run, the answer's check, its resume
    types = [e.type for e in eng.events(r.run_id)]
    assert types.count("child_finished") == 2 and types[-1] == "agent_finished"
