"""Supervision and tree abandon through the public run API (``run.spawn``,
``child.result()``, ``run.gather``, ``run.call``) on SQLite files and PostgreSQL: the
same stories as test_supervision_restart and test_abandon_tree, told as users write
them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agents.kit import wait_until
from conftest import backends
from test_supervision_kit import Books, Counter, booking, events_of, fetcher, settle

from engine import Engine, Supervisor
from engine.kinds import RunStatus

STORES = backends("sqlite", "postgres")


@STORES
def test_one_for_one_through_spawn_and_result(eng: Engine, tmp_path: Path) -> None:
    counter = Counter(tmp_path)
    worker = fetcher(eng, counter)

    @eng.agent(supervise=Supervisor("one_for_one", max_restarts=3, within=60.0))
    def boss(run: Any) -> int:
        out: int = run.spawn(worker, n=5).result()
        return out

    result = eng.run(boss)
    assert (result.status, result.output) == (RunStatus.COMPLETED, 11)
    assert counter.get("fetch") == 2
    [restarted] = events_of(eng, result.run_id, "child_restarted")
    assert restarted["child_run_id"] == restarted["previous_run_id"]
    eng.verify(result.run_id)


@STORES
def test_one_for_all_through_gather(eng: Engine, tmp_path: Path) -> None:
    books, counter = Books(), Counter(tmp_path)
    book = booking(eng, books)

    @eng.agent
    def member(run: Any, name: str, fail: bool = False) -> str:
        n = counter.bump(name)
        book(f"{name}#{n}")
        if fail and n == 1:
            wait_until(lambda: books.done("a#1") and books.done("c#1"), "its siblings booked", 60)
            raise RuntimeError(f"{name} broke")
        return name

    @eng.agent(supervise=Supervisor("one_for_all", max_restarts=2, within=60.0))
    def team(run: Any) -> list[str]:
        kids = [run.spawn(member, name="a"), run.spawn(member, name="b", fail=True)]
        kids.append(run.spawn(member, name="c"))
        out: list[str] = run.gather(*kids)
        return out

    result = eng.run(team)
    assert (result.status, result.output) == (RunStatus.COMPLETED, ["a", "b", "c"])
    assert counter.get("b") == 2
    assert "b#1" in books.undone()
    # The gather's handle on c, replaced by the restart, waits on the new run: each output
    # the parent took comes from a run whose effects still stand, never a compensated one.
    finished = [e.data for e in eng.events(result.run_id) if e.type == "child_finished"]
    for done in (d for d in finished if d["status"] == "completed"):
        assert "compensated" not in [e.type for e in eng.events(done["child_run_id"])], done


@STORES
def test_escalation_up_three_levels_through_call(eng: Engine, tmp_path: Path) -> None:
    once = Supervisor("one_for_one", max_restarts=1, within=60.0)

    @eng.agent
    def worker(run: Any) -> None:
        raise RuntimeError("disk full")

    @eng.agent(supervise=once)
    def lead(run: Any) -> None:
        run.call(worker)

    @eng.agent(supervise=once)
    def top(run: Any) -> None:
        run.call(lead)

    result = eng.run(top)
    assert result.status == RunStatus.FAILED and "disk full" in (result.error or "")
    assert len(events_of(eng, result.run_id, "supervisor_escalated")) == 1


@STORES
def test_abandon_of_a_spawned_tree_undoes_deepest_first(eng: Engine) -> None:
    books = Books()
    book = booking(eng, books)

    @eng.agent
    def node(run: Any, name: str, kids: list[str]) -> None:
        book(f"{name}.1")
        for kid in kids:
            run.spawn(node, name=kid, kids=[kid + "1"] if len(kid) == 1 else [])
        run.ask(f"{name} waits")

    result = eng.run(node, name="G", kids=["A", "B"])
    wait_until(lambda: len(list(eng.runs())) >= 5, "5 runs", 60)
    settle(eng, [r.run_id for r in eng.runs()], (RunStatus.PAUSED,))
    assert eng.abandon(result.run_id).status == RunStatus.ABANDONED
    assert books.undone() == ["B1.1", "B.1", "A1.1", "A.1", "G.1"]
