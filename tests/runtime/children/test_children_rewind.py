"""Rewinding a parent, on SQLite and PostgreSQL: the fork reuses the children spawned
before the target (the same child runs, their recorded outputs, nothing run again, a
child spawned before the target but finished after it waited on again) and gets fresh
children after it (new runs whose parent is the fork). A fork is told from a child by
its fork position: a fork's child is no fork (no inheritance, nothing standing)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from conftest import backends

from engine import Engine
from engine.log.subtree import fork_effects

TREE = backends("sqlite", "postgres")


def _spawned(eng: Engine, run_id: str) -> list[str]:
    return [str(e.data["child_run_id"]) for e in eng.events(run_id) if e.type == "child_spawned"]


@TREE
def test_rewind_reuses_children_before_the_target_and_spawns_fresh_ones_after(
    eng: Engine,
) -> None:
    ran: Counter[str] = Counter()

    @eng.tool(side_effect=True, key=lambda item: f"pack:{item}")
    def pack(item: str) -> str:
        ran[f"pack:{item}"] += 1
        return f"packed {item}"

    @eng.agent
    def packer(run: Any, item: str) -> str:
        ran[item] += 1
        return pack(item)

    @eng.agent
    def order(run: Any) -> Any:
        early = run.spawn(packer, item="early")
        run.checkpoint("spawned")
        first = early.result()
        run.checkpoint("mid")
        later = run.spawn(packer, item="late")
        return {"outs": [first, later.result()], "ids": [early.run_id, later.run_id]}

    r = eng.run(order)
    assert r.status == "completed", r.error
    early_id, late_id = r.output["ids"]

    fork = eng.rewind(r.run_id, "mid")
    assert fork.status == "completed", fork.error
    assert fork.parent_run_id == r.run_id
    assert fork.output["outs"] == ["packed early", "packed late"]
    assert fork.output["ids"][0] == early_id  # reused
    fresh = fork.output["ids"][1]
    assert fresh != late_id
    assert _spawned(eng, fork.run_id) == [early_id, fresh]
    fresh_state = eng.state(fresh)
    assert (fresh_state.parent_run_id, fresh_state.fork_position) == (fork.run_id, None)
    assert eng.state(fork.run_id).fork_position is not None
    assert fork_effects(eng.store, fresh)[0] == []
    # The late child ran again as a new run; its charge is the same business key: the
    # shared ledger gives the recorded result, nothing is packed twice.
    assert ran == {"early": 1, "late": 2, "pack:early": 1, "pack:late": 1}

    # Rewound between a spawn and its result: the fork waits on the same child again.
    again = eng.rewind(r.run_id, "spawned")
    assert again.status == "completed", again.error
    assert again.output["ids"][0] == early_id
    assert again.output["ids"][1] not in (late_id, fresh)
    assert ran["early"] == 1
    finished = [e.data for e in eng.events(again.run_id) if e.type == "child_finished"]
    assert finished[0]["child_run_id"] == early_id


@TREE
def test_a_fork_after_a_child_question_runs_as_a_running_run(eng: Engine) -> None:
    """A fork past the parent's pause on a child's question inherits the calls, not the
    pause: it runs (status running at its later checkpoint), and completes."""

    @eng.agent
    def asker(run: Any) -> Any:
        return run.ask("size?")

    @eng.agent
    def parent(run: Any) -> Any:
        size = run.call(asker)
        run.checkpoint("sized")
        run.checkpoint("later")
        return size

    r = eng.run(parent)
    assert eng.answer(r.run_id, "L").output == "L"
    fork = eng.rewind(r.run_id, "sized")
    assert (fork.status, fork.output) == ("completed", "L")
    types = [e.type for e in eng.events(fork.run_id)]
    assert "child_paused" not in types and "child_finished" in types
    assert eng.state(fork.run_id, "later").status == "running"
