"""Child runs on SQLite and PostgreSQL: ``run.spawn`` starts a child linked to its parent
(``child_spawned`` in the parent, ``parent_run_id`` in the child), ``result()`` /
``run.call`` / ``run.gather`` / ``await child`` give its output (``child_finished``), a
failed child is ChildFailed (catchable), a resumed or verified parent starts nothing
again, grandchildren nest, and a spawn is checked like any call before anything is
written."""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from typing import Any

import pytest
from conftest import backends

from engine import ChildFailed, Engine
from engine.errors import NonDeterminismError

TREE = backends("sqlite", "postgres")


def _types(eng: Engine, run_id: str) -> list[str]:
    return [e.type for e in eng.events(run_id)]


def _data(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


@TREE
def test_spawn_result_call_and_gather_link_parent_and_children(eng: Engine) -> None:
    """Each child is a run of its own with parent_run_id; the parent's log has a
    child_spawned and a child_finished per child (the spawn call's intent and outcome),
    and gather gives outputs in the order given, whatever order they finish in."""
    ran: Counter[str] = Counter()
    gate = threading.Event()

    @eng.agent
    def research(run: Any, topic: str, slow: bool = False) -> str:
        ran[topic] += 1
        if slow:
            gate.wait(30)
        return f"R:{topic}"

    @eng.agent
    def lead(run: Any) -> Any:
        first = run.spawn(research, topic="a")
        one = first.result()
        slow = run.spawn(research, topic="b", slow=True)
        fast = run.spawn(research, topic="c")
        assert fast.result() == "R:c"
        gate.set()
        both = run.gather(slow, fast)
        called = run.call(research, topic="d")
        return {"one": one, "both": both, "called": called, "ids": [first.run_id, slow.run_id]}

    r = eng.run(lead)
    assert r.status == "completed", r.error
    assert r.output["one"] == "R:a"
    assert r.output["both"] == ["R:b", "R:c"]
    assert r.output["called"] == "R:d"
    assert r.parent_run_id is None
    spawned = _data(eng, r.run_id, "child_spawned")
    finished = _data(eng, r.run_id, "child_finished")
    assert [s["call"] for s in spawned] == [1, 2, 3, 4]
    assert sorted(f["call"] for f in finished) == [1, 2, 3, 4]
    assert all(f["status"] == "completed" for f in finished)
    ids = [s["child_run_id"] for s in spawned]
    assert ids[:2] == r.output["ids"]
    for cid in ids:
        state = eng.state(cid)
        assert (state.status, state.parent_run_id, state.fork_position) == (
            "completed",
            r.run_id,
            None,
        )
    children = sorted(s.run_id for s in eng.runs() if s.parent_run_id == r.run_id)
    assert children == sorted(ids)
    assert ran == {"a": 1, "b": 1, "c": 1, "d": 1}


@TREE
def test_a_resumed_or_verified_parent_starts_no_child_again(eng: Engine) -> None:
    """Replay returns the recorded child (same id) and its recorded output: resuming a
    parent that failed after its children, and verifying it, run no child again."""
    ran: Counter[str] = Counter()
    fail = {"once": True}

    @eng.agent
    def worker(run: Any, n: int) -> int:
        ran[f"w{n}"] += 1
        return n * 10

    @eng.agent
    def boss(run: Any) -> Any:
        kids = [run.spawn(worker, n=i) for i in range(3)]
        outs = run.gather(*kids)
        ran["boss"] += 1
        if fail.pop("once", False):
            raise RuntimeError("boss trips after its children")
        return {"outs": outs, "ids": [k.run_id for k in kids]}

    r = eng.run(boss)
    assert r.status == "failed"
    first_ids = [d["child_run_id"] for d in _data(eng, r.run_id, "child_spawned")]
    done = eng.resume(r.run_id)
    assert done.status == "completed", done.error
    assert done.output == {"outs": [0, 10, 20], "ids": first_ids}
    assert eng.verify(r.run_id).status == "completed"
    assert ran == {"w0": 1, "w1": 1, "w2": 1, "boss": 3}  # verify executes code, not calls
    assert len(_data(eng, r.run_id, "child_spawned")) == 3
    assert len([s for s in eng.runs() if s.parent_run_id == r.run_id]) == 3


@TREE
def test_a_failed_child_is_childfailed_and_the_parent_may_catch_it(eng: Engine) -> None:
    """A child that fails is recorded (child_finished status failed, its error) and
    raised as ChildFailed naming it; a parent that catches it goes on; one that does not
    fails, naming the spawn call."""

    @eng.agent
    def shaky(run: Any, why: str) -> None:
        raise ValueError(why)

    @eng.agent
    def careful(run: Any) -> Any:
        try:
            run.call(shaky, why="disk full")
        except ChildFailed as e:
            return {"child": e.run_id, "error": e.error, "status": e.status}
        return None

    @eng.agent
    def careless(run: Any) -> Any:
        return run.call(shaky, why="no route")

    r = eng.run(careful)
    assert r.status == "completed"
    child = _data(eng, r.run_id, "child_spawned")[0]["child_run_id"]
    assert r.output == {"child": child, "error": "ValueError: disk full", "status": "failed"}
    fin = _data(eng, r.run_id, "child_finished")
    assert [(f["status"], f["error"]) for f in fin] == [("failed", "ValueError: disk full")]

    bad = eng.run(careless)
    assert bad.status == "failed"
    assert bad.error is not None and "no route" in bad.error and "ChildFailed" in bad.error
    assert _data(eng, bad.run_id, "agent_failed")[0]["call"] == 1


@TREE
def test_async_agents_await_children_and_gather_them(eng: Engine) -> None:
    """``await child``, ``asyncio.gather(c1, c2)`` and ``await run.gather(...)`` in an
    async agent; outputs in the order given, each child once."""
    ran: Counter[str] = Counter()

    @eng.agent
    async def leaf(run: Any, x: int) -> int:
        ran[str(x)] += 1
        await asyncio.sleep(0)
        return x + 1

    @eng.agent
    def sync_leaf(run: Any, x: int) -> int:
        ran[f"s{x}"] += 1
        return -x

    @eng.agent
    async def root(run: Any) -> Any:
        a = run.spawn(leaf, x=1)
        b = run.spawn(sync_leaf, x=2)
        first = await a
        pair = await asyncio.gather(run.spawn(leaf, x=3), b)
        many = await run.gather(run.spawn(leaf, x=4), run.spawn(sync_leaf, x=5))
        return [first, pair, many]

    r = eng.run(root)
    assert r.status == "completed", r.error
    assert r.output == [2, [4, -2], [5, -5]]
    assert ran == {"1": 1, "s2": 1, "3": 1, "4": 1, "s5": 1}
    assert eng.verify(r.run_id).status == "completed"
    assert ran == {"1": 1, "s2": 1, "3": 1, "4": 1, "s5": 1}


@TREE
def test_gather_waits_for_all_then_raises_the_first_failure_in_order(eng: Engine) -> None:
    """gather lets every child end; with failures, ChildFailed for the first failed
    one in the order given (not the first to fail), every end recorded."""
    late = threading.Event()

    @eng.agent
    def part(run: Any, n: int, fail: bool, wait: bool = False) -> int:
        if wait:
            late.wait(30)
        if fail:
            raise RuntimeError(f"part {n}")
        late.set()
        return n

    @eng.agent
    def whole(run: Any) -> Any:
        kids = [
            run.spawn(part, n=0, fail=True, wait=True),  # fails last
            run.spawn(part, n=1, fail=False),
            run.spawn(part, n=2, fail=True),  # fails first
        ]
        try:
            run.gather(*kids)
        except ChildFailed as e:
            return [e.run_id == kids[0].run_id, e.error]
        return None

    r = eng.run(whole)
    assert r.output == [True, "RuntimeError: part 0"]
    fin = sorted((f["call"], f["status"]) for f in _data(eng, r.run_id, "child_finished"))
    assert fin == [(1, "failed"), (2, "completed"), (3, "failed")]


@TREE
def test_grandchildren_nest_and_a_plain_function_is_an_agent(eng: Engine) -> None:
    """A child spawns children of its own (a plain function, registered as engine.run
    does); each level names its own parent."""

    def leaf(run: Any, n: int) -> int:
        return n * n

    @eng.agent
    def middle(run: Any, n: int) -> Any:
        return sum(run.gather(*[run.spawn(leaf, n=i) for i in range(n)]))

    @eng.agent
    def top(run: Any) -> Any:
        return [run.call(middle, n=3), run.call(middle, n=4)]

    r = eng.run(top)
    assert r.status == "completed", r.error
    assert r.output == [5, 14]
    mids = [d["child_run_id"] for d in _data(eng, r.run_id, "child_spawned")]
    for mid in mids:
        assert eng.state(mid).parent_run_id == r.run_id
        leaves = [d["child_run_id"] for d in _data(eng, mid, "child_spawned")]
        assert leaves and all(eng.state(g).parent_run_id == mid for g in leaves)
        assert all(eng.state(g).agent.endswith("leaf") for g in leaves)


@TREE
def test_status_and_run_id_of_a_child(eng: Engine) -> None:
    """``child.status()`` is the child's status as its log says; ``run_id`` names it."""
    go = threading.Event()

    @eng.agent
    def slow(run: Any) -> str:
        go.wait(30)
        return "done"

    @eng.agent
    def watch(run: Any) -> Any:
        c = run.spawn(slow)
        before = c.status()
        go.set()
        out = c.result()
        return [before, c.status(), out, eng.state(c.run_id).parent_run_id == run.run_id]

    r = eng.run(watch)
    assert r.output == ["running", "completed", "done", True]


@TREE
def test_a_spawn_is_checked_before_anything_is_written(eng: Engine) -> None:
    """Input that does not fit the child agent, or that cannot be recorded, is a
    UsageError in the parent before any child exists; engine.run inside a run points to
    run.spawn."""

    @eng.agent
    def child(run: Any, topic: str) -> str:
        return topic

    @eng.agent
    def wrong_input(run: Any) -> Any:
        run.spawn(child, subject="x")

    @eng.agent
    def nested_run(run: Any) -> Any:
        eng.run(child, topic="x")

    bad = eng.run(wrong_input)
    assert bad.status == "failed" and "does not fit agent" in (bad.error or "")
    assert "child_spawned" not in _types(eng, bad.run_id)
    nested = eng.run(nested_run)
    assert nested.status == "failed" and "run.spawn" in (nested.error or "")
    assert [s for s in eng.runs() if s.parent_run_id is not None] == []


@TREE
def test_changed_code_at_a_spawn_is_refused_without_writing(eng: Engine) -> None:
    """A resumed parent whose code now spawns another agent (or other input) at the
    recorded spawn is a NonDeterminismError: nothing written, nothing started."""
    version = {"topic": "x"}
    ran: Counter[str] = Counter()

    @eng.agent
    def kid(run: Any, topic: str) -> str:
        ran[topic] += 1
        return topic

    @eng.agent
    def parent(run: Any) -> Any:
        out = run.call(kid, topic=version["topic"])
        return run.ask(f"after {out}?")

    r = eng.run(parent)
    assert r.status == "paused"
    before = _types(eng, r.run_id)
    version["topic"] = "y"
    with pytest.raises(NonDeterminismError, match="spawn"):
        eng.answer(r.run_id, "ok")
    assert _types(eng, r.run_id) == before
    assert ran == {"x": 1}
