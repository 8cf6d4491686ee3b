"""The run tree through the API, on every store: ``RunIndex.children`` lists the runs naming
a parent (children and forks, oldest first) on an index of ``parent_run_id``;
``Catalog.tree`` gives the children only (forks left out, an index row the log disagrees
with left out), each node's status, current step and waiting; a forged parent chain that
loops is one CorruptData, not a hang; deep trees are read without recursion and cut at
the depth bound."""

from __future__ import annotations

import sqlite3

import msgspec
import psycopg
import pytest
from conftest import all_backends, backends, schema_of
from tree_kit import root, three_levels, tick

from engine import events as ev
from engine.errors import CorruptData, RunNotFound
from engine.log.history import run_stream
from engine.log.waiting import Child
from engine.runtime.run.catalog import Catalog
from engine.runtime.run.tree import STEP_TAIL, RunNode
from engine.store import Append, RunRow, Store


def _shape(node: RunNode) -> dict[str, object]:
    """The tree as nested {run id: [status, step, waiting, {children}]}."""
    return {
        n.run_id: [n.status, n.step, n.waiting, _shape(n) if n.children else {}]
        for n in node.children
    }


@all_backends
def test_children_lists_children_and_forks_oldest_first(store: Store) -> None:
    """The index answers "whose parent is R" for both kinds of run, in start order."""
    runs = three_levels(store)
    assert [r.run_id for r in store.children("boss")] == ["lead", "solo", "boss-fork"]
    assert [r.run_id for r in store.children("lead")] == ["w1", "w2"]
    assert store.children("w1") == [] and store.children("nobody") == []
    row = store.children("lead")[0]
    assert (row.agent, row.status, row.parent_run_id) == ("agents:worker", "paused", "lead")
    assert row.position == runs["w1"].writer.state.position


@all_backends
def test_the_tree_has_three_levels_with_status_step_and_waiting(store: Store) -> None:
    """boss (paused on lead) -> lead (paused on w1) -> w1 asks, w2 in step 'fetch';
    solo completed; the fork of boss is not a child."""
    three_levels(store)
    top = Catalog(store=store).tree("boss")
    assert (top.run_id, top.agent, top.status, top.parent_run_id) == (
        "boss",
        "agents:boss",
        "paused",
        None,
    )
    assert top.step == "plan 1/3"
    assert top.waiting == "child w1 asks: which region?"
    assert top.waits_on == Child("lead", "w1", "which region?")
    assert _shape(top) == {
        "lead": [
            "paused",
            None,
            "child w1 asks: which region?",
            {
                "w1": ["paused", None, "which region?", {}],
                "w2": ["running", "fetch", None, {}],
            },
        ],
        "solo": ["completed", None, None, {}],
    }
    assert [n.run_id for n in top.walk()] == ["boss", "lead", "w1", "w2", "solo"]
    assert all(n.fork_position is None for n in top.walk())


@all_backends
def test_a_subtree_and_a_fork_are_trees_of_their_own(store: Store) -> None:
    """tree(child) starts at that child (its parent named); a prefix resolves; a fork's
    tree is the fork alone, marked as one."""
    three_levels(store)
    cat = Catalog(store=store)
    lead = cat.tree("lea")
    assert lead.run_id == "lead" and lead.parent_run_id == "boss"
    assert [c.run_id for c in lead.children] == ["w1", "w2"]
    fork = cat.tree("boss-fork")
    assert (fork.parent_run_id, fork.fork_position, fork.children) == ("boss", 2, ())
    with pytest.raises(RunNotFound):
        cat.tree("nobody")


@all_backends
def test_the_tree_as_json_has_the_contract_fields_recursively(store: Store) -> None:
    """{"run_id","agent","status","step","waiting","parent_run_id","children"} at every
    level."""
    three_levels(store)
    doc = msgspec.to_builtins(Catalog(store=store).tree("boss"))
    keys = {"run_id", "agent", "status", "step", "waiting", "parent_run_id", "children"}
    stack = [doc]
    seen = 0
    while stack:
        node = stack.pop()
        assert keys <= set(node)
        stack.extend(node["children"])
        seen += 1
    assert seen == 5


@all_backends
def test_a_step_is_the_innermost_open_one_else_the_plan_progress(store: Store) -> None:
    """An open step inside a closed one and an open one: the innermost still open; past
    the tail read back, the plan's progress stands in; an ended run shows only its plan."""
    r = root(store, "steps")
    r.add(ev.PlanCreated(at=tick(), call=r.call(), steps=["a", "b"]))
    r.step("a")
    r.step("inner", done=True)
    r.step("b")
    r.step("deepest")
    r.add(ev.StepCompleted(at=tick(), call=5, name="deepest"))
    cat = Catalog(store=store)
    assert cat.tree("steps").step == "b"
    for _ in range(STEP_TAIL):
        r.add(ev.Checkpoint(at=tick(), call=r.call(), name="tick"))
    assert cat.tree("steps").step == "plan 0/2"
    done = root(store, "done")
    done.add(ev.PlanCreated(at=tick(), call=done.call(), steps=["a"]))
    done.step("a", done=True)
    done.finish()
    assert cat.tree("done").step == "plan 1/1"


@all_backends
def test_a_parent_chain_that_loops_is_one_corrupt_data_error(store: Store) -> None:
    """Two runs each naming the other as parent, and a run naming itself: CorruptData
    naming the loop, from either end, instead of a hang."""
    root(store, "a", parent_run_id="b")
    root(store, "b", parent_run_id="a")
    root(store, "me", parent_run_id="me")
    cat = Catalog(store=store)
    for start in ("a", "b", "me"):
        with pytest.raises(CorruptData, match="run tree loops"):
            cat.tree(start)


@all_backends
def test_an_index_row_the_log_disagrees_with_is_not_a_child(store: Store) -> None:
    """A forged index row naming a parent its run's log does not name is left out; a row
    whose run has no events is CorruptData."""
    parent = root(store, "p")
    started = ev.AgentStarted(at=tick(), agent="agents:x", import_path="agents")
    row = RunRow("stray", "agents:x", "running", started.at, started.at, "p", 1)
    store.append([Append(run_stream("stray"), 1, started)], runs=[row])
    assert [r.run_id for r in store.children("p")] == ["stray"]
    cat = Catalog(store=store)
    assert cat.tree("p").children == ()
    ghost = RunRow("ghost", "agents:x", "running", tick(), tick(), parent_run_id="p")
    store.append([], runs=[ghost])
    with pytest.raises(CorruptData, match="ghost"):
        cat.tree("p")
    assert parent.run_id == "p"


@backends("memory", "sqlite")
def test_a_deep_chain_is_read_without_recursion_and_cut_at_the_bound(store: Store) -> None:
    """A chain 150 runs deep: the default tree stops 100 levels down, the last node
    marked truncated, and encodes as JSON; a smaller depth cuts sooner."""
    node = root(store, "d0")
    for i in range(1, 151):
        node = node.spawn(f"d{i}")
    cat = Catalog(store=store)
    top = cat.tree("d0")
    chain = top.walk()
    assert len(chain) == 101 and chain[-1].run_id == "d100" and chain[-1].truncated
    assert not any(n.truncated for n in chain[:-1])
    assert msgspec.json.decode(msgspec.json.encode(top))["run_id"] == "d0"
    short = cat.tree("d0", depth=2).walk()
    assert [n.run_id for n in short] == ["d0", "d1", "d2"] and short[-1].truncated
    end = cat.tree("d148", depth=2).walk()  # the bound falls on the last run: nothing cut
    assert [n.run_id for n in end] == ["d148", "d149", "d150"] and not end[-1].truncated


@backends("sqlite", "postgres")
def test_the_parent_index_exists_on_sql_stores(store_url: str, store: Store) -> None:
    """``agentlog_runs_parent`` is created (if missing) with the run index."""
    if store_url.startswith("sqlite"):
        path = store_url[len("sqlite:///") :]
        with sqlite3.connect(path) as conn:
            rows = conn.execute(
                "SELECT name FROM sqlite_master WHERE type='index' AND tbl_name='agentlog_runs'"
            ).fetchall()
        names = {r[0] for r in rows}
    else:
        with psycopg.connect(store_url.split("?")[0]) as conn:
            rows = conn.execute(
                "SELECT indexname FROM pg_indexes WHERE schemaname=%s AND tablename=%s",
                (schema_of(store_url), "agentlog_runs"),
            ).fetchall()
        names = {r[0] for r in rows}
    assert "agentlog_runs_parent" in names


@all_backends
def test_a_run_whose_only_descendants_are_forks_is_not_cut_at_the_bound(store: Store) -> None:
    """The index's lineage tells a fork's row from a child's: a leaf at the depth bound
    that has forks and no children is not ``truncated``, and no fork is read as a child."""
    leaf = root(store, "p").spawn("leaf")
    root(store, "leaf-fork", parent_run_id="leaf", fork_position=2)
    assert [r.lineage for r in store.children("leaf")] == ["fork"]
    top = Catalog(store=store).tree("p", depth=1)
    assert [(n.run_id, n.truncated) for n in top.walk()] == [("p", False), ("leaf", False)]
    assert leaf.run_id == "leaf"
