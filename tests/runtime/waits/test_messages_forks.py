"""What a fork says about itself, on a SQLite file and on PostgreSQL: ``diff`` of a parent
and its fork does not call checkpoints different because the fork renumbered their
positions, and a step the fork inherited open counts its duration from the fork's start,
not from its parent's step start."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from engine import Engine
from replay import diff
from tests.conftest import backends

STORES = backends("sqlite", "postgres")


@pytest.fixture
def eng(store_url: str) -> Iterator[Engine]:
    e = Engine(store_url)
    yield e
    e.close()


def _of(e: Engine, run_id: str, type_: str) -> list[Any]:
    return [x for x in e.events(run_id) if x.type == type_]


@STORES
def test_diff_of_a_parent_and_its_fork_compares_checkpoints_by_name(eng: Engine) -> None:
    """The parent paused and resumed before its checkpoint (an ``agent_resumed`` the fork
    leaves out): same checkpoints in the same order, so no checkpoint difference; a fork
    that reaches another checkpoint does differ."""

    @eng.agent(name="tests:fork_diff")
    def asker(run: Any) -> dict[str, Any]:
        answer = run.ask("approve?")
        run.checkpoint("after")
        if answer == "more":
            run.checkpoint("extra")
        return {"answer": answer}

    parent = eng.answer(eng.run(asker).run_id, "yes")
    fork = eng.rewind(parent.run_id, "after")
    parent_at = [c.position for c in eng.checkpoints(parent.run_id)]
    assert parent_at != [c.position for c in eng.checkpoints(fork.run_id)]  # renumbered
    doc = diff.compare(diff.side(eng, parent.run_id), diff.side(eng, fork.run_id))
    assert "checkpoints" not in doc["state"] and doc["calls"] == []

    other = eng.answer(eng.run(asker).run_id, "more")
    doc = diff.compare(diff.side(eng, parent.run_id), diff.side(eng, other.run_id))
    assert doc["state"]["checkpoints"] == {"left": ["after"], "right": ["after", "extra"]}


@STORES
def test_a_forks_inherited_step_counts_from_the_forks_start(eng: Engine) -> None:
    """Rewound to a checkpoint inside a step, the fork completes the step: its duration
    is at most the fork's own lifetime, while the parent's counts from the step's start."""

    @eng.agent(name="tests:fork_step")
    def worker(run: Any) -> str:
        with run.step("work"):
            run.checkpoint("inside")
            return str(run.decide("x", lambda: "done"))

    parent = eng.run(worker)
    fork = eng.rewind(parent.run_id, "inside")
    assert fork.status == "completed"
    began = _of(eng, fork.run_id, "agent_started")[0].at
    (step_start,) = _of(eng, fork.run_id, "step_started")  # the parent's, inherited
    assert step_start.at < began
    (done,) = _of(eng, fork.run_id, "step_completed")
    assert 0 <= done.data["duration"] <= (done.at - began).total_seconds() + 1e-5
