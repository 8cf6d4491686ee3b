"""A tree of runs killed and recovered, on SQLite and PostgreSQL, against a real HTTP
service on a loopback socket: the process running a parent and its children (threads
of it) is SIGKILLed while children charge; ``engine.recover()`` in another process (and
``agentlog recover``) completes the whole tree, and each charge reaches the service once.
Children share the ledger: two children of one tree charging one business key send
it once."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from agents.kit import engine_call, python
from agents.loopback import loopback
from conftest import backends

from engine import Engine

TREE = backends("sqlite", "postgres")
MODULE = "tests.agents.children_agents"
RECOVER = """
import json, sys
from engine import Engine
e = Engine.open(sys.argv[1])
print(json.dumps(sorted([r.run_id, r.status] for r in e.recover())))
"""


def _kill(url: str, http: str, run_id: str, orders: list[str], failpoint: str) -> None:
    env = {"AGENTLOG_TEST_HTTP": http, "AGENTLOG_FAILPOINTS": failpoint}
    p = python("-m", MODULE, url, run_id, json.dumps(orders), env=env)
    assert p.returncode == -9, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])


def _tree(eng: Engine, run_id: str) -> list[str]:
    """``run_id`` and its descendants, from the spawn records."""
    out, todo = [], [run_id]
    while todo:
        rid = todo.pop()
        out.append(rid)
        todo += [e.data["child_run_id"] for e in eng.events(rid) if e.type == "child_spawned"]
    return out


@TREE
def test_a_tree_killed_while_children_charge_is_recovered_once(
    store_url: str, tmp_path: Path
) -> None:
    """SIGKILL at the second charge's return (sent, outcome not recorded) while the
    other children run: recover in a new process resumes the parent, which brings its
    dead children (and a grandchild) back; every order is charged exactly once (one
    request each: the uncertain charge is settled by the verifier, not re-sent)."""
    orders = ["o1", "o2", "ship-o3", "o4"]
    with loopback() as svc:
        _kill(store_url, svc.url, "tree", orders, "after_tool:2")
        eng = Engine.open(store_url)
        try:
            assert eng.state("tree").status == "running"
            env = {"AGENTLOG_TEST_HTTP": svc.url}
            p = python("-c", RECOVER, store_url, env=env)
            assert p.returncode == 0, p.stderr[-3000:]
            state = eng.state("tree")
            assert state.status == "completed", (state, p.stdout, p.stderr[-3000:])
            receipts = state.output
            assert [r.startswith("shipped ") for r in receipts] == [False, False, True, False]
            tree = _tree(eng, "tree")
            assert len(tree) == 6  # the parent, four children, a grandchild
            assert {eng.state(r).status for r in tree} == {"completed"}
            again = python("-c", RECOVER, store_url, env=env)
            assert json.loads(again.stdout) == []
        finally:
            eng.close()
        charged = ["o1", "o2", "o3", "o4"]
        assert Counter(order for order, _ in svc.requests) == {o: 1 for o in charged}
        assert {o: svc.charges(o) for o in charged} == {o: 1 for o in charged}


@TREE
def test_resume_parent_brings_its_killed_children_back(store_url: str, tmp_path: Path) -> None:
    """Resuming only the PARENT of a killed tree (in a new process) recovers the
    subtree: its wait finds each child running under a dead owner and starts it again;
    every order is charged once."""
    orders = ["p1", "p2", "ship-p3"]
    with loopback() as svc:
        _kill(store_url, svc.url, "parent-only", orders, "after_tool:2")
        env = {"AGENTLOG_TEST_HTTP": svc.url}
        done = engine_call(store_url, "resume", "parent-only", env=env)
        assert (done["status"], len(done["output"])) == ("completed", 3), done
        eng = Engine.open(store_url)
        try:
            tree = _tree(eng, "parent-only")
            assert len(tree) == 5 and {eng.state(r).status for r in tree} == {"completed"}
        finally:
            eng.close()
        assert Counter(order for order, _ in svc.requests) == {"p1": 1, "p2": 1, "p3": 1}


@TREE
def test_the_cli_recover_completes_a_killed_tree(store_url: str, tmp_path: Path) -> None:
    """``agentlog recover`` brings a killed tree back as engine.recover does."""
    orders = ["c1", "ship-c2"]
    with loopback() as svc:
        _kill(store_url, svc.url, "cli-tree", orders, "after_tool:1")
        env = {"AGENTLOG_TEST_HTTP": svc.url}
        p = python("-m", "replay.cli", "recover", "--url", store_url, env=env)
        assert p.returncode == 0, p.stderr[-3000:]
        eng = Engine.open(store_url)
        try:
            assert eng.state("cli-tree").status == "completed", p.stdout
        finally:
            eng.close()
        assert Counter(order for order, _ in svc.requests) == {"c1": 1, "c2": 1}


@TREE
def test_children_share_the_ledger(eng: Engine) -> None:
    """Two children of one tree (a child and a grandchild) charging one business key:
    one request reaches the service, both get its receipt."""
    import os

    from agents import children_agents as agents

    with loopback() as svc:
        os.environ["AGENTLOG_TEST_HTTP"] = svc.url
        try:
            r = eng.run(agents.team, orders=["same", "ship-same", "same"])
        finally:
            os.environ.pop("AGENTLOG_TEST_HTTP", None)
        assert r.status == "completed", r.error
        out: Any = r.output
        assert out[0] == out[2] and out[1] == "shipped " + out[0]
        assert svc.requests == [("same", "charge:same")]
        assert svc.charges("same") == 1
