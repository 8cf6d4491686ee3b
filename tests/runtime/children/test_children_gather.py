"""A sync parent's ``run.gather`` waits on all its children at once, on SQLite and
PostgreSQL: while one child still runs, another that asks a person pauses the parent at
once (``waiting`` naming the asker and its question; ``answer PARENT`` reaches it), and
one that sleeps long suspends it; the tree then completes, each child run once."""

from __future__ import annotations

import threading
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from agents.kit import wait_until
from conftest import backends

from engine import Engine, EngineConfig
from engine.log.waiting import Child
from engine.runtime.run.results import RunResult

TREE = backends("sqlite", "postgres")


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    """Waits longer than 0.1s suspend the run (a child's long sleep holds no thread)."""
    e = Engine(store_url, config=EngineConfig(inline_wait=0.1))  # type: ignore[call-arg]
    yield e
    e.close()


class Tree:
    """A sync parent gathering a slow child (running until ``release`` is set) and
    ``other``; ``ids`` names the runs once spawned, ``ran`` counts the children's work."""

    def __init__(self, eng: Engine, other: Any) -> None:
        self.eng, self.release = eng, threading.Event()
        self.ran: Counter[str] = Counter()
        self.ids: dict[str, str] = {}

        @eng.agent
        def slow(run: Any) -> str:
            self.ran["slow"] += 1
            assert self.release.wait(60), "the test never released the slow child"
            return "slow done"

        @eng.agent
        def lead(run: Any) -> Any:
            a, b = run.spawn(slow), run.spawn(other)
            self.ids.update(slow=a.run_id, other=b.run_id)
            return run.gather(a, b)

        self.lead = lead

    def in_thread(self, call: Any) -> list[RunResult]:
        """Start ``call`` in a thread; its result lands in the list returned."""
        out: list[RunResult] = []
        threading.Thread(target=lambda: out.append(call()), daemon=True).start()
        return out

    def status(self, name: str) -> str:
        return self.eng.state(self.ids[name]).status

    def stopped(self, status: str, waiting: str) -> RunResult:
        """Run the parent (in a thread: the old wait held it until the slow child ended)
        and check it stopped as ``status``, ``waiting`` ("{kid}": the other child's id),
        while its slow child still runs."""
        started = self.in_thread(lambda: self.eng.run(self.lead))
        [r] = wait_until(lambda: started, "the parent to stop while its slow child runs")
        assert (r.status, r.waiting) == (status, waiting.format(kid=self.ids["other"]))
        assert self.status("slow") == "running"
        return r


@TREE
def test_a_child_that_asks_pauses_the_gathering_parent_while_another_runs(eng: Engine) -> None:
    ran: Counter[str] = Counter()

    @eng.agent
    def asker(run: Any) -> str:
        said = str(run.ask("go?"))
        ran["answered"] += 1
        return said

    tree = Tree(eng, asker)
    try:
        r = tree.stopped("paused", "child {kid} asks: go?")
        answered = tree.in_thread(lambda: eng.answer(r.run_id, "yes"))
        wait_until(lambda: tree.status("other") == "completed", "the answer to reach the asker")
        assert tree.status("slow") == "running" and not answered
    finally:
        tree.release.set()
    [done] = wait_until(lambda: answered, "the tree to complete")
    assert (done.status, done.output) == ("completed", ["slow done", "yes"])
    assert (tree.ran, ran) == ({"slow": 1}, {"answered": 1})
    types = [e.type for e in eng.events(r.run_id)]
    assert (types.count("child_finished"), types.count("child_paused")) == (2, 1)


@TREE
def test_a_child_that_sleeps_long_suspends_the_gathering_parent_while_another_runs(
    eng: Engine,
) -> None:
    ran: Counter[str] = Counter()

    @eng.agent
    def sleeper(run: Any) -> str:
        run.sleep(0.5)
        ran["woke"] += 1
        return "rested"

    tree = Tree(eng, sleeper)
    try:
        r = tree.stopped("waiting", "child {kid}")
        assert eng.state(r.run_id).waits_on == Child(tree.ids["other"])
    finally:
        tree.release.set()
    wait_until(lambda: tree.status("slow") == "completed", "the slow child to end")

    def finished() -> bool:
        eng.recover()  # wakes the sleeper once its timer is due; its end continues the parent
        return eng.state(r.run_id).status == "completed"

    wait_until(finished, "the tree to complete")
    assert eng.state(r.run_id).output == ["slow done", "rested"]
    assert (tree.ran, ran) == ({"slow": 1}, {"woke": 1})
    types = [e.type for e in eng.events(r.run_id)]
    assert (types.count("child_finished"), types.count("run_waiting")) == (2, 1)


@TREE
def test_a_child_that_ended_is_recorded_before_a_sibling_pauses_the_parent(eng: Engine) -> None:
    """The wait reads every unfinished child each pass: a child given after the asker
    that ended before the question is recorded (child_finished) before child_paused,
    and is not waited on again once the parent continues."""
    ids: dict[str, str] = {}

    @eng.agent
    def quick(run: Any) -> str:
        return "quick done"

    @eng.agent
    def asker(run: Any) -> str:
        wait_until(lambda: "quick" in ids, "the quick child's spawn")
        wait_until(lambda: eng.state(ids["quick"]).status == "completed", "the quick child")
        return str(run.ask("go?"))

    @eng.agent
    def lead(run: Any) -> Any:
        a = run.spawn(asker)
        b = run.spawn(quick)
        ids.update(asker=a.run_id, quick=b.run_id)
        return run.gather(a, b)

    r = eng.run(lead)
    assert (r.status, r.waiting) == ("paused", f"child {ids['asker']} asks: go?")
    types = [e.type for e in eng.events(r.run_id)]
    assert types[-2:] == ["child_finished", "child_paused"]
    done = eng.answer(r.run_id, "yes")
    assert (done.status, done.output) == ("completed", ["yes", "quick done"])
    types = [e.type for e in eng.events(r.run_id)]
    assert types.count("child_finished") == 2
