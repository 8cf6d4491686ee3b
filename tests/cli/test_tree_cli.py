"""``agentlog tree`` and the run list of many agents through a real subprocess, on a
SQLite file and on PostgreSQL: the three-level tree drawn and as JSON, forks left out;
``runs --parent`` lists a parent's children (and its forks, each named as what it is);
``runs --status waiting`` and ``stats`` count waiting runs; a looping forged store, an
unknown run and a bad --depth are one line on stderr, exit 2."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from test_cli_kit import Workdir, make_workdir, one_line_error, sqlite_url
from tree_kit import root, three_levels, tick

from engine import events as ev
from engine.store import open_store

TREE = """\
boss  agents:boss  paused  step plan 1/3  waiting: child w1 asks: which region?
├── lead  agents:lead  paused  waiting: child w1 asks: which region?
│   ├── w1  agents:worker  paused  waiting: which region?
│   └── w2  agents:worker  running  step fetch
└── solo  agents:solo  completed
"""


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def work(request: pytest.FixtureRequest, tmp_path: Path) -> Workdir:
    """A store holding the three-level tree, a fork of its root, and a waiting run."""
    url = sqlite_url(tmp_path) if request.param == "sqlite" else request.getfixturevalue("pg_url")
    store = open_store(url)
    try:
        three_levels(store)
        sleeper = root(store, "sleeper", agent="agents:sleepy")
        sleeper.add(ev.TimerSet(at=tick(), call=1, until=tick() + 3600))
        sleeper.add(ev.RunWaiting(at=tick(), call=1, reason="timer", until=tick() + 3600))
    finally:
        store.close()
    return make_workdir(tmp_path, url)


def _ids(rows: list[dict[str, Any]]) -> list[str]:
    return [r["run_id"] for r in rows]


def test_tree_draws_the_children_with_status_step_and_waiting(work: Workdir) -> None:
    """The drawn tree, exactly; a prefix resolves; a subtree names its parent."""
    assert work.ok("tree", "boss").out == TREE
    lead = work.ok("tree", "le").out.splitlines()
    assert lead[0].endswith("(child of boss)") and len(lead) == 3
    fork = work.ok("tree", "boss-fork").out
    assert fork == "boss-fork  agents:boss  running  (fork of boss at 2)\n"


def test_tree_json_is_the_nested_contract_document(work: Workdir) -> None:
    """--json: the contract's fields at every level, children in spawn order."""
    doc = work.ok("tree", "boss", "--json").json()
    keys = {"run_id", "agent", "status", "step", "waiting", "parent_run_id", "children"}
    assert keys <= set(doc) and doc["status"] == "paused"
    assert _ids(doc["children"]) == ["lead", "solo"]
    lead = doc["children"][0]
    assert lead["parent_run_id"] == "boss" and _ids(lead["children"]) == ["w1", "w2"]
    w1, w2 = lead["children"]
    assert (w1["status"], w1["waiting"], w1["children"]) == ("paused", "which region?", [])
    assert (w2["status"], w2["step"], w2["waiting"]) == ("running", "fetch", None)
    assert keys <= set(w2)


def test_depth_cuts_the_tree_and_says_where(work: Workdir) -> None:
    """--depth 1 shows one level and tells how to see the rest; bad values are refused."""
    out = work.ok("tree", "boss", "--depth", "1").out.splitlines()
    assert len(out) == 3 and "deeper runs not shown: `agentlog tree lead`" in out[1]
    assert work.ok("tree", "boss", "--depth", "1", "--json").json()["children"][0]["truncated"]
    one_line_error(work.cli("tree", "boss", "--depth", "0"), "--depth must be from 1 to 100")
    one_line_error(work.cli("tree", "boss", "--depth", "x"), "--depth 'x' is not a whole")
    one_line_error(work.cli("tree", "nobody"), "no run matches 'nobody'")


def test_runs_parent_lists_children_and_forks_each_named(work: Workdir) -> None:
    """--parent boss: its two children and its fork (newest first); the text says child
    of or fork of; the board's lineage says the same; plain runs agrees."""
    argvs = [["runs", "--parent", "boss", "--json"], ["runs", "--parent", "lead", "--json"]]
    argvs += [["runs", "--parent", "boss"], ["runs"]]
    results = work.many(argvs)  # one process for the four
    assert [r.code for r in results] == [0] * 4, results
    boss, lead, text, plain = [r.out for r in results]
    rows = json.loads(boss)
    assert _ids(rows) == ["boss-fork", "solo", "lead"]
    assert [r["lineage"] for r in rows] == ["fork", "child", "child"]
    assert _ids(json.loads(lead)) == ["w2", "w1"]
    assert "  fork of boss" in text and text.count("  child of boss") == 2
    plain = plain.splitlines()
    w1 = next(line for line in plain if line.startswith("w1 "))
    fork = next(line for line in plain if line.startswith("boss-fork "))
    assert w1.endswith("child of lead") and fork.endswith("fork of boss")


def test_waiting_runs_are_listed_and_counted(work: Workdir) -> None:
    """--status waiting picks the sleeping run (index and view alike); stats counts it."""
    argvs = [["runs", "--status", "waiting", "--json"]]
    argvs += [["runs", "--status", "waiting", "--limit", "5", "--json"], ["stats", "--json"]]
    results = work.many([*argvs, ["tree", "sleeper", "--json"]])  # one process for the four
    assert [r.code for r in results] == [0] * 4, results
    index, board, stats, tree = [r.json() for r in results]
    assert _ids(index) == ["sleeper"]
    assert _ids(board) == ["sleeper"] and board[0]["status"] == "waiting"
    by_status = stats["runs"]["by_status"]
    assert by_status == {"paused": 3, "running": 2, "completed": 1, "waiting": 1}
    assert tree["waiting"].startswith("timer until ")


def test_a_looping_store_is_one_error_not_a_hang(work: Workdir) -> None:
    """Runs whose parents name each other: exit 2, one line naming the loop."""
    store = open_store(work.url)
    try:
        root(store, "loop-a", parent_run_id="loop-b")
        root(store, "loop-b", parent_run_id="loop-a")
    finally:
        store.close()
    one_line_error(work.cli("tree", "loop-a"), "run tree loops", "loop-a")
    one_line_error(work.cli("tree", "loop-b", "--json"), "run tree loops")
