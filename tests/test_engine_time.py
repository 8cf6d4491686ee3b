"""The engine's time (SQLite files and PostgreSQL): every durable deadline reads
``EngineConfig.wall``, so a fake wall clock moves a run's sleep, a receive's timeout and
an owner lease's expiry with no real waiting; ``run.now()`` is a recorded reading of that
clock, the same on replay."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from engine import Engine, EngineConfig
from tests.agents import mailbox_agents as agents
from tests.agents.kit import Crash
from tests.conftest import backends

STORES = backends("sqlite", "postgres")
ELSEWHERE = "another-host:1:abcdef01:"  # an owner on another host: alive until it expires


class FakeWall:
    """A wall clock that moves only when told."""

    def __init__(self) -> None:
        self.now = time.time()

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall() -> FakeWall:
    return FakeWall()


@pytest.fixture
def eng(store_url: str, wall: FakeWall) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(wall=wall, inline_wait=0.0))
    yield e
    e.close()


@STORES
def test_an_hour_long_sleep_is_due_once_the_engine_wall_clock_moved_an_hour(
    eng: Engine, wall: FakeWall
) -> None:
    r = eng.run(agents.sleeper, seconds=3600)
    assert r.status == "waiting"
    timer = next(e for e in eng.events(r.run_id) if e.type == "timer_set")
    assert timer.data["until"] == pytest.approx(wall.now + 3600)
    wall.now += 3599
    assert eng.recover() == [] and eng.state(r.run_id).status == "waiting"
    wall.now += 2
    [done] = eng.recover()
    assert (done.run_id, done.status, done.output) == (r.run_id, "completed", "woke")


@STORES
def test_a_receive_times_out_by_the_engine_wall_clock(eng: Engine, wall: FakeWall) -> None:
    r = eng.run(agents.receiver, timeout=600.0)
    assert r.status == "waiting"
    assert eng.recover() == []
    wall.now += 601
    [done] = eng.recover()
    assert (done.status, done.output) == ("completed", [None])


@STORES
def test_an_owner_lease_expires_by_the_engine_wall_clock(eng: Engine, wall: FakeWall) -> None:
    """A run leased by a live owner elsewhere is left alone until the lease's expiry
    passes on the engine's wall clock; then recover resumes it."""
    crash = [True]

    @eng.tool
    def look() -> str:
        if crash[0]:
            raise Crash()
        return "seen"

    @eng.agent
    def work(run: Any) -> str:
        return look()

    with pytest.raises(Crash):
        eng.run(work, run_id="leased-elsewhere")
    crash[0] = False
    assert eng.store.take_lease("leased-elsewhere", ELSEWHERE, wall.now + 30, wall.now) == ELSEWHERE
    assert eng.leases.dead_holder(eng.store, "leased-elsewhere") is None
    assert eng.recover() == []
    wall.now += 31
    assert eng.leases.dead_holder(eng.store, "leased-elsewhere") == ELSEWHERE
    [done] = eng.recover()
    assert (done.run_id, done.status, done.output) == ("leased-elsewhere", "completed", "seen")
