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
from replay.output import Out
from replay.timeline import story, views
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


def _stamps(eng: Engine) -> tuple[Any, Any]:
    """A sync and an async agent reading ``run.now()`` on each side of an hour's sleep."""

    @eng.agent
    def stamped(run: Any) -> list[float]:
        before = run.now()
        run.sleep(3600)
        return [before, run.now()]

    @eng.agent
    async def stamped_async(run: Any) -> list[float]:
        before = run.now()
        await run.sleep(3600)
        return [before, run.now()]

    return stamped, stamped_async


@STORES
@pytest.mark.parametrize("kind", ["sync", "async"])
def test_run_now_is_the_engine_wall_clock_recorded_and_the_same_on_replay(
    eng: Engine, wall: FakeWall, kind: str
) -> None:
    """The reading before the sleep is recorded: the resume an hour later re-executes the
    agent from its first line and gets the first reading back, then a new one; a verify
    replays both."""
    agent = _stamps(eng)[kind == "async"]
    start = wall.now
    r = eng.run(agent)
    assert r.status == "waiting"
    wall.now += 3600
    [done] = eng.recover()
    assert done.output == [start, start + 3600]
    readings = [e.data for e in eng.events(r.run_id) if e.type == "llm_decided"]
    assert [(d["name"], d["value"]) for d in readings] == [
        ("run.now", start),
        ("run.now", start + 3600),
    ]
    wall.now += 50
    eng.verify(r.run_id)  # same calls, same values: no divergence
    assert eng.state(r.run_id).output == [start, start + 3600]


def test_the_timeline_shows_a_run_now_reading_as_a_utc_time(eng: Engine, wall: FakeWall) -> None:
    @eng.agent
    def stamp(run: Any) -> float:
        return float(run.now())

    wall.now = 1_800_000_000.25
    r = eng.run(stamp)
    plain = Out(color=False)
    lines = [plain.text(*row) for row in story(views(eng, r.run_id))]
    assert any("⏱ now 2027-01-15T08:00:00.250+00:00" in line for line in lines), lines
