"""A parent stopped on a child, holding no thread (suspended on a child that sleeps, or
paused on a child that asks), is continued when that child then fails: it gets the
ChildFailed its code catches, and completes. On SQLite and PostgreSQL; nothing but the
child's own execution ending continues the parent (no recover)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import backends, engine_with

from engine import ChildFailed, Engine
from engine.log.waiting import Child

TREE = backends("sqlite", "postgres")


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    """An engine whose waits suspend the run at once (no inline wait)."""
    yield from engine_with(store_url, inline_wait=0)


def _catching_parent(eng: Engine, child: Any) -> Any:
    @eng.agent
    def boss(run: Any) -> str:
        try:
            run.call(child)
        except ChildFailed as e:
            return f"caught: {e.status}"
        return "the child completed"

    return boss


def _child_id(eng: Engine, run_id: str) -> str:
    [spawned] = [e.data for e in eng.events(run_id) if e.type == "child_spawned"]
    return str(spawned["child_run_id"])


@TREE
def test_a_parent_suspended_on_a_sleeping_child_is_woken_when_the_child_fails(
    eng: Engine,
) -> None:
    broken = {"now": False}

    @eng.agent
    def sleeper(run: Any) -> str:
        if broken["now"]:
            raise RuntimeError("the child broke")
        run.sleep(3600)  # not due for an hour: nothing wakes it but the test
        return "rested"

    r = eng.run(_catching_parent(eng, sleeper))
    kid = _child_id(eng, r.run_id)
    assert (r.status, eng.state(r.run_id).waits_on) == ("waiting", Child(kid))
    assert eng.state(kid).status == "waiting"
    broken["now"] = True
    assert eng.resume(kid).status == "failed"
    parent = eng.state(r.run_id)
    assert (parent.status, parent.output) == ("completed", "caught: failed")
    finished = [e.data for e in eng.events(r.run_id) if e.type == "child_finished"]
    assert [(d["child_run_id"], d["status"]) for d in finished] == [(kid, "failed")]


@TREE
def test_a_parent_paused_on_an_asking_child_is_woken_when_the_child_fails(eng: Engine) -> None:
    @eng.agent
    def asker(run: Any) -> str:
        if run.ask("go on?") != "yes":
            raise RuntimeError("told to stop")
        return "went on"

    r = eng.run(_catching_parent(eng, asker))
    kid = _child_id(eng, r.run_id)
    assert (r.status, eng.state(kid).status) == ("paused", "paused")
    eng.answer(r.run_id, "no")  # reaches the child, which fails
    assert eng.state(kid).status == "failed"
    parent = eng.state(r.run_id)
    assert (parent.status, parent.output) == ("completed", "caught: failed")
