"""Subtree recovery of failed children, on SQLite and PostgreSQL: a parent that failed
because its child failed (ChildFailed not caught) waits on that child again when
resumed, so ``resume CHILD`` completing the child continues the parent at once without
re-running its siblings; a failure the parent caught is replayed as it was."""

from __future__ import annotations

from collections import Counter
from typing import Any

from conftest import backends

from engine import ChildFailed, Engine

TREE = backends("sqlite", "postgres")


def _data(eng: Engine, run_id: str, kind: str) -> list[dict[str, Any]]:
    return [e.data for e in eng.events(run_id) if e.type == kind]


def _children(eng: Engine, run_id: str) -> list[str]:
    return [str(d["child_run_id"]) for d in _data(eng, run_id, "child_spawned")]


def _flaky(eng: Engine) -> tuple[Any, dict[str, bool]]:
    """A child agent failing while ``broken["yes"]``, then returning "ok"."""
    broken = {"yes": True}

    @eng.agent
    def flaky(run: Any) -> str:
        if broken["yes"]:
            raise RuntimeError("flaky")
        return "ok"

    return flaky, broken


@TREE
def test_resume_child_continues_a_parent_that_failed_because_of_it(eng: Engine) -> None:
    """The parent fails at the spawn call; the sibling completed; resuming the fixed
    child completes it, and the parent continues (one more child_finished, completed),
    each sibling run once."""
    ran: Counter[str] = Counter()
    broken = {"yes": True}

    @eng.agent
    def fetch(run: Any, n: int) -> int:
        ran[f"fetch{n}"] += 1
        if n == 1 and broken["yes"]:
            raise ConnectionError("upstream down")
        return n

    @eng.agent
    def report(run: Any) -> Any:
        ran["report"] += 1
        return run.gather(run.spawn(fetch, n=0), run.spawn(fetch, n=1), run.spawn(fetch, n=2))

    r = eng.run(report)
    assert r.status == "failed" and "upstream down" in (r.error or "")
    kids = _children(eng, r.run_id)
    assert _data(eng, r.run_id, "agent_failed")[0]["call"] == 2
    assert [eng.state(k).status for k in kids] == ["completed", "failed", "completed"]

    broken["yes"] = False
    child = eng.resume(kids[1])
    assert (child.status, child.parent_run_id) == ("completed", r.run_id)
    parent = eng.state(r.run_id)
    assert (parent.status, parent.output) == ("completed", [0, 1, 2])
    assert ran == {"fetch0": 1, "fetch1": 2, "fetch2": 1, "report": 2}
    fin = [(d["call"], d["status"]) for d in _data(eng, r.run_id, "child_finished")]
    assert fin[-1] == (2, "completed") and fin.count((2, "failed")) == 1


@TREE
def test_resume_parent_waits_on_its_failed_child_again(eng: Engine) -> None:
    """Resuming the parent while its child is still failed fails it again at the same
    call, recording no second child_finished; resuming the child then completes it and
    continues the parent; resume PARENT afterwards gives its recorded output."""
    flaky, broken = _flaky(eng)

    @eng.agent
    def parent(run: Any) -> Any:
        return run.call(flaky)

    r = eng.run(parent)
    again = eng.resume(r.run_id)
    assert again.status == "failed" and "flaky" in (again.error or "")
    assert len(_data(eng, r.run_id, "child_finished")) == 1
    broken["yes"] = False
    kid = _children(eng, r.run_id)[0]
    eng.resume(kid)
    assert eng.state(r.run_id).status == "completed"
    assert eng.resume(r.run_id).output == "ok"


@TREE
def test_a_caught_child_failure_replays_as_recorded(eng: Engine) -> None:
    """A parent that caught ChildFailed and went on replays the recorded failure, even
    if the child was resumed and completed since (its log decides, not the child now)."""
    flaky, broken = _flaky(eng)

    @eng.agent
    def parent(run: Any) -> Any:
        try:
            got = run.call(flaky)
        except ChildFailed:
            got = "fallback"
        return [got, run.ask("continue?")]

    r = eng.run(parent)
    assert r.status == "paused"
    broken["yes"] = False
    kid = _children(eng, r.run_id)[0]
    assert eng.resume(kid).status == "completed"
    assert eng.state(r.run_id).status == "paused"  # not continued: it did not fail on it
    done = eng.answer(r.run_id, "yes")
    assert done.output == ["fallback", "yes"]


@TREE
def test_an_uncaught_gather_failure_names_the_first_failed_child_in_order(eng: Engine) -> None:
    """Two children fail: the parent fails at the first one's spawn call (in the order
    given); resuming that child continues the parent, which then fails at the second
    (its failure replayed as recorded); resuming the second completes the tree."""
    broken = {0: True, 2: True}

    @eng.agent
    def part(run: Any, n: int) -> int:
        if broken.get(n):
            raise RuntimeError(f"part {n}")
        return n

    @eng.agent
    def whole(run: Any) -> Any:
        return run.gather(*[run.spawn(part, n=i) for i in range(3)])

    r = eng.run(whole)
    assert r.status == "failed" and "part 0" in (r.error or "")
    assert [d["call"] for d in _data(eng, r.run_id, "agent_failed")] == [1]
    kids = _children(eng, r.run_id)
    broken.clear()
    eng.resume(kids[0])
    assert eng.state(r.run_id).status == "failed"
    assert [d["call"] for d in _data(eng, r.run_id, "agent_failed")] == [1, 3]
    eng.resume(kids[2])
    assert (eng.state(r.run_id).status, eng.state(r.run_id).output) == ("completed", [0, 1, 2])
