"""A store failure under the engine's own writes (not a tool's outcome: a checkpoint, an
end) stops the execution, the run left running and resumable, instead of failing it:
a lost connection is the store's failure, not the agent's (SQLite files and PostgreSQL,
the failures real: PostgreSQL's backends terminated, SQLite's inserts aborted by a
trigger another connection made). Found by the crash campaign's ``--store-loss``: a
sibling whose connection was terminated while its parent gathered failed with
StoreError, and the parent with it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from conftest import backends
from test_outcome_not_recorded import Breaker

from engine import Engine, EngineConfig
from engine.kinds import RunStatus

both = backends("sqlite", "postgres")


@pytest.fixture
def loss(store_url: str) -> Breaker:
    """Loses the store once armed: PostgreSQL's backends of the engine terminated; on
    SQLite a trigger aborts every insert of a checkpoint until healed."""
    return Breaker(store_url, refused=("checkpoint",))


@pytest.fixture
def engines(loss: Breaker) -> Iterator[list[Engine]]:
    opened: list[Engine] = []
    yield opened
    for e in opened:
        e.close()


def _agent(eng: Engine, loss: Breaker, executions: list[int]) -> Any:
    """An agent whose first execution loses the store between two checkpoints; a later
    execution (the store back: healed) records the second."""

    @eng.agent(name="keeper")
    def keeper(run: Any) -> str:
        executions.append(1)
        run.checkpoint("before the loss")  # its connection in use: the loss reaches it
        loss.arm() if len(executions) == 1 else loss.heal()
        run.checkpoint("after the loss")
        return "kept"

    return keeper


@both
def test_a_store_failure_under_a_checkpoint_stops_the_run_resumable(
    loss: Breaker, engines: list[Engine]
) -> None:
    """The checkpoint cannot be written: the run is not failed (no agent_failed), it
    stays running with the store's error named, and its resume completes it."""
    eng = Engine.open(loss.url)
    engines.append(eng)
    executions: list[int] = []
    keeper = _agent(eng, loss, executions)
    r = eng.run(keeper, run_id="keep-1")
    assert r.status == RunStatus.RUNNING, (r.status, r.error)
    assert r.error is not None and "keep-1" in r.error and "store" in r.error
    again = Engine.open(loss.url)
    engines.append(again)
    _agent(again, loss, executions)
    assert "agent_failed" not in [e.type for e in again.events("keep-1")]
    resumed = again.resume("keep-1")
    assert (resumed.status, resumed.output) == (RunStatus.COMPLETED, "kept")


@both
def test_a_child_that_lost_the_store_is_not_its_parents_failure(
    loss: Breaker, engines: list[Engine]
) -> None:
    """The child's checkpoint cannot be written: it stops, running, and is started again
    by its waiting parent (or, when the loss stopped the parent too, by the parent's
    resume): the tree completes and no run of it failed."""
    eng = Engine.open(loss.url, config=EngineConfig(lease_ttl=2.0))  # a start again soon
    engines.append(eng)
    keeper = _agent(eng, loss, [])

    @eng.agent(name="boss")
    def boss(run: Any) -> str:
        out: str = run.spawn(keeper).result()
        return f"boss: {out}"

    r = eng.run(boss, run_id="boss-1")
    if r.status == RunStatus.RUNNING:  # PostgreSQL: the parent's connection was lost too
        r = eng.resume("boss-1")
    assert (r.status, r.output) == (RunStatus.COMPLETED, "boss: kept"), r.error
    for row in eng.store.runs():
        assert row.status == RunStatus.COMPLETED
        assert "agent_failed" not in [e.type for e in eng.events(row.run_id)]
