"""A worker keeps runs moving with nobody typing recover: a sleeping run continues once
its timer is due, a receive's deadline is kept however late the receiver wakes, and a
run whose owner died is taken over."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from engine import Engine, EngineConfig
from tests.conftest import backends


class Wall:
    """A wall clock the test moves."""

    def __init__(self) -> None:
        self.now = 1_900_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def wall() -> Wall:
    return Wall()


@pytest.fixture
def eng(store_url: str, wall: Wall) -> Iterator[Engine]:
    e = Engine(store_url, config=EngineConfig(inline_wait=0.0, lease_ttl=5.0, wall=wall))
    yield e
    e.close()


@backends("memory", "sqlite", "postgres")
def test_a_message_posted_after_the_deadline_is_not_the_receives(eng: Engine, wall: Wall) -> None:
    @eng.agent(name="tests.wakes:two_receives")
    def two(run: object) -> list[object]:
        first = run.recv("t", timeout=10)  # type: ignore[attr-defined]
        second = run.recv("t")  # type: ignore[attr-defined]
        return [first, second]

    r = eng.run(two)
    assert r.status == "waiting"
    wall.now += 30  # nobody woke it at its deadline; the message comes 20 s late
    eng.send(r.run_id, "t", "late")
    done = eng.wait(r.run_id, timeout=60)
    assert done.output == [None, "late"]  # the late message went to the next receive


@backends("memory", "sqlite", "postgres")
def test_a_message_posted_before_the_deadline_is_taken_however_late_the_wake(
    eng: Engine, wall: Wall
) -> None:
    @eng.agent(name="tests.wakes:one_receive")
    def one(run: object) -> object:
        return run.recv("t", timeout=10)  # type: ignore[attr-defined]

    r = eng.run(one)
    wall.now += 5
    eng.send(r.run_id, "t", "in time")  # posted at +5, inside the deadline
    wall.now += 100
    assert eng.wait(r.run_id, timeout=60).output == "in time"


@backends("sqlite", "postgres")
def test_a_worker_wakes_a_sleeping_run_when_its_timer_is_due(store_url: str) -> None:
    e = Engine(store_url, config=EngineConfig(inline_wait=0.0, lease_ttl=5.0))

    @e.agent(name="tests.wakes:napper")
    def napper(run: object) -> str:
        run.sleep(0.5)  # type: ignore[attr-defined]
        return "rested"

    w = e.worker(concurrency=1, grace=5)
    t = threading.Thread(target=w.run)
    t.start()
    try:
        r = e.run(napper)
        assert r.status == "waiting"  # nothing runs it but the worker
        assert e.wait(r.run_id, timeout=60).output == "rested"
    finally:
        w.stop()
        t.join()
        e.close()
