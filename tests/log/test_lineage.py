"""A run's lineage (root, child or fork) is computed once, from its ``agent_started``.

The fold keeps it in ``RunState.lineage`` (``Root | ChildOf | ForkOf``); the run tree,
the abandon of a subtree, wakes, forks and the views read it from there (or from
``lineage_of`` of the start event) instead of testing "a parent and no fork position" by
hand. A snapshot from before the field
(``run_state:2``) upcasts with the lineage its parent and fork position give.
"""

from __future__ import annotations

import msgspec
import pytest
from conftest import all_backends
from tree_kit import three_levels

from engine import events as ev
from engine.log.history import rebuild
from engine.log.snapshots import decode_snapshot
from engine.log.state import ChildOf, ForkOf, Lineage, Root, RunState, fold, lineage_of
from engine.runtime.run.tree import tree
from engine.store import Snapshot, Store

STARTS = [
    (ev.AgentStarted(at=1.0, agent="m:f", import_path="m"), Root()),
    (ev.AgentStarted(at=1.0, agent="m:f", import_path="m", parent_run_id="p"), ChildOf("p")),
    (
        ev.AgentStarted(at=1.0, agent="m:f", import_path="m", parent_run_id="p", reuses="old"),
        ChildOf("p"),
    ),
    (
        ev.AgentStarted(at=1.0, agent="m:f", import_path="m", parent_run_id="p", fork_position=3),
        ForkOf("p", 3),
    ),
    (  # a forged start: a fork position and no parent is nobody's fork
        ev.AgentStarted(at=1.0, agent="m:f", import_path="m", fork_position=3),
        Root(),
    ),
]
IDS = ["root", "child", "restart", "fork", "forged"]


@pytest.mark.parametrize(("started", "lineage"), STARTS, ids=IDS)
def test_the_fold_keeps_the_lineage_its_start_names(
    started: ev.AgentStarted, lineage: Lineage
) -> None:
    """A parent and no fork position is a child (a restart's new run too); both, a fork;
    no parent, a root."""
    state = fold([(1, started)], RunState(run_id="r"))
    assert state.lineage == lineage_of(started) == lineage


@pytest.mark.parametrize(("started", "lineage"), STARTS, ids=IDS)
def test_an_old_snapshot_gets_the_lineage_of_its_parent_and_fork_position(
    started: ev.AgentStarted, lineage: Lineage
) -> None:
    """A run_state:2 snapshot has no lineage field: it reads from the fields it kept."""
    state = fold([(1, started)], RunState(run_id="r"))
    old = {k: v for k, v in msgspec.to_builtins(state).items() if k != "lineage"}
    assert decode_snapshot(Snapshot(1, "run_state:2", msgspec.msgpack.encode(old))) == state


@all_backends
def test_children_and_forks_are_told_apart_by_their_lineage(store: Store) -> None:
    """boss's fork names boss as its parent, as boss's children do: it is no child of
    boss's tree, its own tree's root says fork, and the children say child."""
    three_levels(store)
    states = {r: rebuild(store, r) for r in ("boss", "lead", "w1", "boss-fork")}
    assert {r: s.lineage for r, s in states.items()} == {
        "boss": Root(),
        "lead": ChildOf("boss"),
        "w1": ChildOf("lead"),
        "boss-fork": ForkOf("boss", 2),
    }
    top = tree(store, "boss")
    assert [(n.run_id, n.lineage) for n in top.walk()] == [
        ("boss", Root()),
        ("lead", ChildOf("boss")),
        ("w1", ChildOf("lead")),
        ("w2", ChildOf("lead")),
        ("solo", ChildOf("boss")),
    ]
    assert tree(store, "boss-fork").lineage == ForkOf("boss", 2)
