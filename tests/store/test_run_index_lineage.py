"""The run index keeps each run's lineage (root, child or fork), written with its rows in
the run's commits, on every store; an index an older agentlog made (no lineage column)
gets the column when opened, its roots filled at once, a child's or a fork's read from
its run's start until the run's next commit writes it."""

from __future__ import annotations

from contextlib import closing
from typing import Any

from engine import Engine
from replay.output import run_doc
from tests.conftest import all_backends, backends, raw_sql

OLD_STORES = backends("sqlite", "postgres")


def _agents(eng: Engine) -> Any:
    """A root agent that looks once, then calls a child that asks a question."""

    @eng.tool
    def look(what: str) -> str:
        return f"saw {what}"

    @eng.agent
    def kid(run: Any) -> str:
        return str(run.ask("go on?"))

    @eng.agent
    def top(run: Any) -> str:
        look("a")
        return str(run.call(kid))

    return top


def _family(eng: Engine) -> dict[str, str]:
    """A root whose child asks a question (both paused), and a fork of the root."""
    root = eng.run(_agents(eng))
    assert root.status == "paused", root.error
    [child] = [r.run_id for r in eng.runs() if r.parent_run_id == root.run_id]
    fork = eng.rewind(root.run_id, to=2)
    return {"root": root.run_id, "child": child, "fork": fork.run_id}


def _indexed(eng: Engine) -> dict[str, str | None]:
    return {r.run_id: r.lineage for r in eng.store.runs()}


@all_backends
def test_the_index_names_each_runs_lineage(eng: Engine) -> None:
    """The store's own rows (nothing read from the logs) say root, child and fork, and
    so do ``engine.runs()`` and ``runs --json``'s documents."""
    ids = _family(eng)
    want = {ids["root"]: "root", ids["child"]: "child", ids["fork"]: "fork"}
    assert {k: v for k, v in _indexed(eng).items() if k in want} == want
    listed = {r.run_id: r.lineage for r in eng.runs()}
    assert {k: listed[k] for k in want} == want
    docs = {d["run_id"]: d["lineage"] for d in map(run_doc, eng.runs())}
    assert {k: docs[k] for k in want} == want


@OLD_STORES
def test_an_older_index_gets_the_column_and_each_row_its_lineage(store_url: str) -> None:
    ids: dict[str, str] = {}
    with closing(Engine(store_url)) as eng:
        ids = _family(eng)
    raw_sql(store_url, "ALTER TABLE {s}agentlog_runs DROP COLUMN lineage")  # an older index
    with closing(Engine(store_url)) as eng:
        _agents(eng)  # this process's definitions, as a new process would import them
        raw = _indexed(eng)
        assert (raw[ids["root"]], raw[ids["child"]], raw[ids["fork"]]) == ("root", None, None)
        listed = {r.run_id: r.lineage for r in eng.runs()}  # read from the runs' starts
        assert [listed[ids[k]] for k in ("root", "child", "fork")] == ["root", "child", "fork"]
        assert eng.answer(ids["child"], "yes").status == "completed"  # the child's commits
        assert _indexed(eng)[ids["child"]] == "child"
        assert eng.state(ids["root"]).status == "completed"
        assert _indexed(eng)[ids["fork"]] is None  # no commit of its own since
