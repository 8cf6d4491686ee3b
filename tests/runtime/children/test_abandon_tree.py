"""Abandoning a tree of runs (SQLite files and PostgreSQL): ``abandon PARENT`` first
abandons its unfinished children, each with its own subtree, latest spawned first (so
every run's descendants are undone before it), each compensating its own effects last
first, then the parent's own. A child executing in this process is stopped first; one a
live owner elsewhere holds is RunBusy naming it, with nothing undone; a child whose undo
fails stops the parent's abandon naming it, and abandoning again finishes the job
without undoing anything twice."""

from __future__ import annotations

import time
from typing import Any

import pytest
from agents.kit import wait_until
from conftest import backends
from test_supervision_kit import Books, booking, settle, spawn

from engine import Engine
from engine.errors import RunBusy
from engine.kinds import RunStatus

STORES = backends("sqlite", "postgres")
PAUSED = (RunStatus.PAUSED,)


def _tree(eng: Engine, books: Books) -> Any:
    """An agent that books two effects, spawns its subtree (``shape``: name -> children)
    and waits for a person."""

    book = booking(eng, books)

    @eng.agent
    def node(run: Any, name: str, shape: dict[str, list[str]]) -> None:
        book(f"{name}.1")
        book(f"{name}.2")
        for kid in shape.get(name, []):
            spawn(run, node, name=kid, shape=shape)
        run.ask(f"{name} waits")

    return node


SHAPE = {"G": ["A", "B"], "A": ["A1"], "B": ["B1"]}


def _names(eng: Engine, root: str) -> dict[str, str]:
    """Run ids by node name, over the whole tree under ``root``."""
    found, todo = {}, [root]
    while todo:
        rid = todo.pop()
        found[eng.events(rid)[0].data["input"]["name"]] = rid
        todo += [e.data["child_run_id"] for e in eng.events(rid) if e.type == "child_spawned"]
    return found


def _grown(eng: Engine, books: Books) -> dict[str, str]:
    result = eng.run(_tree(eng, books), name="G", shape=SHAPE)
    assert result.status == RunStatus.PAUSED

    def grown() -> dict[str, str] | None:
        ids = _names(eng, result.run_id)
        return ids if len(ids) >= 5 else None

    ids: dict[str, str] = wait_until(grown, "the tree's 5 runs", 60)
    settle(eng, list(ids.values()), PAUSED)
    return ids


@STORES
def test_abandon_of_a_three_level_tree_undoes_deepest_first(eng: Engine) -> None:
    books = Books()
    ids = _grown(eng, books)
    result = eng.abandon(ids["G"])
    assert result.status == RunStatus.ABANDONED
    order = ["B1", "B", "A1", "A", "G"]  # latest spawned subtree first, each child first
    assert books.undone() == [f"{n}.{i}" for n in order for i in (2, 1)]
    assert {eng.state(r).status for r in ids.values()} == {RunStatus.ABANDONED}
    assert eng.abandon(ids["G"]).status == RunStatus.ABANDONED
    assert len(books.undone()) == 10  # nothing undone twice


@STORES
def test_a_child_held_by_a_live_owner_elsewhere_is_run_busy_naming_it(eng: Engine) -> None:
    books = Books()
    ids = _grown(eng, books)
    other = "elsewhere:1:feedbeef"  # another machine's owner: alive until it expires
    # The thread that paused it lets go just after: take the lease once it did.
    wait_until(
        lambda: eng.store.take_lease(ids["B1"], other, time.time() + 60, time.time()) == other,
        "the lease of B1",
        60,
    )
    with pytest.raises(RunBusy, match=ids["B1"]):
        eng.abandon(ids["G"])
    assert books.undone() == []
    assert {eng.state(r).status for r in ids.values()} == {RunStatus.PAUSED}


@STORES
def test_a_failed_undo_in_a_grandchild_stops_the_abandon_and_a_retry_finishes(
    eng: Engine,
) -> None:
    books = Books()
    ids = _grown(eng, books)
    books.refuse.add("A1.1")
    result = eng.abandon(ids["G"])
    assert result.status == RunStatus.FAILED
    assert ids["A"] in (result.error or "") and "A1.1" in (result.error or "")
    assert books.undone() == ["B1.2", "B1.1", "B.2", "B.1", "A1.2"]
    assert eng.state(ids["A1"]).status == eng.state(ids["A"]).status == RunStatus.FAILED
    assert eng.state(ids["B"]).status == RunStatus.ABANDONED
    again = eng.abandon(ids["G"])
    assert again.status == RunStatus.ABANDONED
    assert books.undone()[5:] == ["A1.1", "A.2", "A.1", "G.2", "G.1"]


@STORES
def test_a_child_executing_in_this_process_is_stopped_then_abandoned(eng: Engine) -> None:
    books = Books()
    node = _tree(eng, books)
    counted = {"ticks": 0}

    @eng.agent
    def ticker(run: Any) -> None:
        run.decide("start", books.add, "do", "T.1")
        for _ in range(5000):
            counted["ticks"] += 1
            run.decide("tick", time.sleep, 0.01)

    @eng.agent
    def holder(run: Any) -> None:
        spawn(run, ticker)
        spawn(run, node, name="N", shape={})
        run.ask("holds")

    result = eng.run(holder)
    [t_id, n_id] = [e.data["child_run_id"] for e in eng.events(result.run_id)[1:3]]
    settle(eng, [n_id], PAUSED)
    wait_until(lambda: counted["ticks"] >= 3, "three ticks", 60)
    assert eng.abandon(result.run_id).status == RunStatus.ABANDONED
    assert eng.state(t_id).status == RunStatus.ABANDONED
    assert books.undone() == ["N.2", "N.1"]
    ticks = counted["ticks"]
    time.sleep(0.2)
    assert counted["ticks"] == ticks  # it stopped for good
